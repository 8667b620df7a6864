"""Render a ``TipsReport``: a terminal table, JSON, and the markdown of ``docs/tips.md``."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchsmith.report.console import fmt_bytes, fmt_seconds
from torchsmith.tips import TipRow, TipsReport


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _pct(noise: float | None) -> str:
    if noise is None:
        return "-"
    return f"±{noise:.1%}" if noise < 0.1 else f"±{noise:.0%}"


def _note(r: TipRow) -> str:
    if r.error:
        return r.error
    notes = []
    if r.compile_seconds is not None:
        notes.append(f"compile {fmt_seconds(r.compile_seconds)}")
    if r.speed is not None and r.noise is not None and abs(r.speed - 1) < r.noise:
        notes.append(f"within noise ({_pct(r.noise)})")
    return "; ".join(notes)


def _machine_lines(report: TipsReport) -> list[str]:
    m = report.machine
    lines = [f"CPU: {m.cpu_model} ({m.cpu_capability} kernels, native bf16: {m.native_bf16}), "
             f"{m.available_cores} of {m.logical_cores} cores available, torch threads {m.torch_threads}",
             f"torch {m.torch_version}, Python {m.python_version}, {m.platform}"]
    if m.cuda_device:
        lines.append(f"GPU: {m.cuda_device} (compute capability {m.cuda_capability})")
    if report.load_average:
        before, after = report.load_average
        # "after" counts this benchmark's own threads; only the load before it says who else was there.
        why = ("other processes were competing for them" if before > 0.5 * m.logical_cores
               else "quiet before the run; the load after includes the benchmark's own threads")
        lines.append(f"1-min load average: {before:.1f} before, {after:.1f} after (on {m.logical_cores} cores: {why})")
    return lines


def tips_to_dict(report: TipsReport) -> dict[str, Any]:
    b = report.baseline
    return {
        "workload": report.workload, "device": report.device, "steps": report.steps, "warmup": report.warmup,
        "finished_utc": report.finished_utc, "load_average": report.load_average,
        "machine": dataclasses.asdict(report.machine),
        "baseline": {"plan": b.plan.to_dict(), "step_seconds": b.step_seconds, "peak_memory_bytes": b.peak_memory_bytes,
                     "losses": b.losses, "error": b.error},
        "candidates": [{**{k: v for k, v in dataclasses.asdict(r).items() if k != "plan"},
                        "plan": r.plan.to_dict()} for r in report.rows],
        "folklore": [dataclasses.asdict(f) for f in report.folklore],
    }


def render_tips(report: TipsReport, console: Console) -> None:
    b = report.baseline
    table = Table(title=f"torchsmith bench tips · {report.workload} · {report.device} · "
                        f"each transform alone vs eager fp32")
    table.add_column("transform")
    table.add_column("plan")
    table.add_column("speed", justify="right", no_wrap=True)
    table.add_column("best", justify="right", no_wrap=True)
    table.add_column("peak mem", justify="right", no_wrap=True)
    table.add_column("loss Δ", justify="right", no_wrap=True)
    table.add_column("note")
    table.add_row("baseline", "as written", f"{fmt_seconds(b.step_seconds)}/step",
                  f"{fmt_seconds(min(b.step_times, default=None))}", fmt_bytes(b.peak_memory_bytes),
                  "0", escape(b.error or ""))
    for r in report.rows:
        color = "red" if r.error else ("green" if (r.speed or 0) > 1 + (r.noise or 0) else "")
        table.add_row(r.transform, escape(r.label), f"[{color}]{_x(r.speed)}[/]" if color else _x(r.speed),
                      _x(r.speed_best), _x(r.memory), f"{r.loss_rel_diff:.1e}" if r.loss_rel_diff is not None else "-",
                      escape(_note(r)))
    console.print(table)
    console.print(f"speed = baseline step time / plan step time (>1 is faster), median and best step; "
                  f"peak mem = plan peak / baseline peak; "
                  f"loss Δ = largest relative loss difference over the same {report.warmup + report.steps} batches "
                  f"and seed. Each candidate alternates steps with its own baseline: {report.steps} timed steps "
                  f"after {report.warmup} warm-up.", style="dim")
    for line in _machine_lines(report):
        console.print(line, style="dim")
    for f in report.folklore:
        console.print(f"\n[bold]folklore:[/] {escape(f.claim)}")
        console.print(f"  [bold]measured:[/] {escape(f.verdict)}")
        for d in f.details:
            console.print(f"  - {escape(d)}")
        for s in f.skipped:
            console.print(f"  [yellow]skipped:[/] {escape(s)}")


def tips_to_markdown(report: TipsReport, command: str) -> str:
    """The page ``docs/tips.md``: written from a run, stating the machine it ran on."""
    b = report.baseline
    out = [
        "# Tips, measured",
        "",
        f"Generated by `{command}` on {report.finished_utc}. Every figure below comes from that run; rerun the "
        "command to measure your own machine. A tip that helps here can hurt elsewhere.",
        "",
        "## Machine",
        "",
        *[f"- {line}" for line in _machine_lines(report)],
        "",
        f"## Each transform alone against eager fp32 ({report.workload}, {report.device})",
        "",
        f"Baseline: {fmt_seconds(b.step_seconds)} per step, peak memory {fmt_bytes(b.peak_memory_bytes)}. "
        f"Each candidate ran in this one process alternating step by step with its own baseline built from the "
        f"same seed, over the same {report.warmup + report.steps} batches: {report.warmup} warm-up steps, then "
        f"{report.steps} timed. The baseline figures pool every pair's baseline.",
        "",
        "- **speed**: baseline step time / plan step time (above 1 is faster), the median over rounds of "
        "the ratio of a candidate step to the baseline step run just before it",
        "- **speed (best)**: baseline's fastest step / plan's fastest step: a second view; where it disagrees "
        "with speed, a burst of load hit that row",
        "- **peak mem**: plan peak memory / baseline peak memory (below 1 uses less)",
        "- **loss Δ**: largest relative difference of the per-step loss from the baseline's",
        "- **noise**: interquartile range / median of those per-round ratios; a speed within it of 1 is not a result",
        "",
        "| transform | plan | speed | speed (best) | peak mem | loss Δ | noise | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in report.rows:
        note = _note(r).replace("|", "\\|")
        out.append(f"| {r.transform} | `{r.label}` | {_x(r.speed)} | {_x(r.speed_best)} | {_x(r.memory)} | "
                   f"{f'{r.loss_rel_diff:.1e}' if r.loss_rel_diff is not None else '-'} | "
                   f"{_pct(r.noise)} | {note} |")
    out += ["", "## Folklore", ""]
    for f in report.folklore:
        out += [f"### {f.claim}", "", f"**Measured:** {f.verdict}", ""]
        out += [f"- {d}" for d in f.details]
        out += [f"- *Skipped:* {s}" for s in f.skipped]
        out.append("")
    return "\n".join(out)
