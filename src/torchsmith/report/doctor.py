"""Render a ``DoctorReport``: a rich terminal report, JSON-ready data, and a self-contained HTML page.

The HTML embeds its plots (matplotlib PNGs, base64): a stacked bar of each recorded step's
time by phase, and the memory split at the peak.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from torchsmith.atomic import atomic_write_text
from torchsmith.profile.analysis import CATEGORIES
from torchsmith.profile.doctor import DoctorReport
from torchsmith.report.console import fmt_bytes, fmt_seconds

COLORS = {"data": "#e4572e", "forward": "#4c8bf5", "backward": "#17becf", "optimizer": "#9467bd",
          "sync": "#ffbf00", "other": "#9e9e9e"}
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
MEMORY_PARTS = ("params", "grads", "optimizer_state", "activations")


def doctor_to_dict(report: DoctorReport) -> dict[str, Any]:
    a = report.analysis
    return {
        "target": report.target, "mode": report.mode, "exit_code": report.exit_code,
        "device": report.facts.device, "model": report.facts.model,
        "step_seconds_median": a.step_seconds,
        "unprofiled_step_seconds": report.facts.unprofiled_step_seconds,
        "breakdown_share": {c: a.share(c) for c in CATEGORIES},
        "breakdown_seconds_median": {c: a.seconds(c) for c in CATEGORIES},
        "optimizer_share": a.optimizer_shares(),
        "window": window_note(report), "partial": report.partial, "interrupted": report.interrupted,
        "crashed": report.crashed,
        "steps": [s.phases for s in a.steps],
        "top_ops": [{"name": o.name, "shapes": o.shapes, "count": o.count, "self_seconds": o.self_seconds}
                    for o in a.top_ops],
        "top_kernels": [{"name": k.name, "count": k.count, "seconds": k.self_seconds} for k in a.top_kernels],
        "memory": report.memory,
        "findings": [{"rule": f.rule, "title": f.title, "severity": f.severity, "evidence": f.evidence,
                      "fix": f.fix, "expected_gain": f.expected_gain} for f in report.findings],
        "verified": [{"rule": v.rule, "plan": v.plan, "baseline_seconds": v.baseline_seconds,
                      "fixed_seconds": v.fixed_seconds, "speedup": v.speedup, "loss_rel_diff": v.loss_rel_diff,
                      "error": v.error} for v in report.verified],
        "trace": str(report.trace_path) if report.trace_path else None, "capture": report.trace_note,
        "analysis_seconds": a.analysis_seconds,
    }


def window_note(report: DoctorReport) -> str:
    """How the capture ended, when not as planned: a partial window, a crash, a Ctrl-C. Else ""."""
    recorded, planned = len(report.analysis.steps), int(report.facts.config.get("active", 0))
    parts = []
    if report.interrupted:
        parts.append(f"interrupted (Ctrl-C) after {report.facts.steps_seen} optimizer steps; "
                     "the captured window is analysed below")
    elif report.crashed:
        parts.append(f"the script failed (exit code {report.exit_code}) after {report.facts.steps_seen} "
                     f"optimizer steps")
    if report.partial:
        parts.append(f"partial window: {recorded} of {planned} steps recorded, figures from "
                     f"{'that step' if recorded == 1 else 'those steps'} only")
    return "; ".join(parts)


def render_doctor(report: DoctorReport, console: Console) -> None:
    a, f = report.analysis, report.facts
    console.rule(f"torchsmith doctor · {escape(report.target)} · {f.device} · {f.model or 'model'}")
    if note := window_note(report):
        console.print(f"[bold yellow]note:[/] {escape(note)}")
    title = f"step time: {fmt_seconds(a.step_seconds)} median over {len(a.steps)} recorded steps"
    if f.unprofiled_step_seconds:
        title += (f"\n(unprofiled: {fmt_seconds(min(f.unprofiled_step_seconds))}; "
                  f"read the shares, the profiler inflates times)")
    table = Table(title=title)
    table.add_column("phase")
    table.add_column("median", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    for c in CATEGORIES:
        share = a.share(c)
        table.add_row(c, fmt_seconds(a.seconds(c)), f"{share:.0%}", f"[{COLORS[c]}]" + "█" * round(share * 30) + "[/]")
        if c == "optimizer" and len(shares := a.optimizer_shares()) > 1:
            for label, sh in sorted(shares.items()):
                table.add_row(f"  {escape(label)}", "", f"{sh:.0%}", "")
    console.print(table)
    ops = Table(title="top operators by self time")
    for col in ("operator", "input shapes", "calls", "self time"):
        ops.add_column(col, justify="right" if col in ("calls", "self time") else "left")
    for o in a.top_ops[:8]:
        ops.add_row(escape(o.name), escape(o.shapes[:60]), str(o.count), fmt_seconds(o.self_seconds))
    console.print(ops)
    if a.top_kernels:
        kernels = Table(title="top GPU kernels by device time")
        for col in ("kernel", "launches", "time"):
            kernels.add_column(col, justify="left" if col == "kernel" else "right")
        for k in a.top_kernels[:8]:
            kernels.add_row(escape(k.name[:70]), str(k.count), fmt_seconds(k.self_seconds))
        console.print(kernels)
    if report.memory:
        m = report.memory
        console.print("memory peak " + fmt_bytes(m["peak"]) + ": " +
                      ", ".join(f"{p.replace('_', ' ')} {fmt_bytes(m[p])}" for p in MEMORY_PARTS))
    if not report.findings:
        console.print("[green]no findings:[/] none of the rules fired on these measurements")
    for fd in report.findings:
        body = "\n".join(f"• {escape(e)}" for e in fd.evidence)
        body += f"\n[bold]expected gain:[/] {escape(fd.expected_gain)}"
        console.print(Panel(body,
                            title=f"[{SEVERITY_STYLE[fd.severity]}]{fd.severity}[/] {fd.rule}: {escape(fd.title)}",
                            title_align="left"))
        console.print(Syntax(fd.fix, "python", theme="ansi_dark", background_color="default"))
    for v in report.verified:
        if v.error:
            console.print(f"verify {v.rule}: [red]could not run[/] {escape(v.error)}")
        else:
            console.print(f"verify {v.rule} ({escape(v.plan)}): {fmt_seconds(v.baseline_seconds)} -> "
                          f"{fmt_seconds(v.fixed_seconds)} per step, [bold]{v.speedup:.2f}x[/] "
                          f"(loss rel. diff {v.loss_rel_diff:.1e})")
    console.print(f"capture: {report.trace_note}; analysis {fmt_seconds(a.analysis_seconds)}", style="dim")
    if report.trace_path:
        console.print(f"trace: {report.trace_path} (open in https://ui.perfetto.dev or chrome://tracing)", style="dim")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def breakdown_png(report: DoctorReport) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = report.analysis.steps
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.45 * len(steps)))
    left = [0.0] * len(steps)
    labels = [f"step {i + 1}" for i in range(len(steps))]
    for c in CATEGORIES:
        widths = [s.phases[c] * 1e3 for s in steps]
        ax.barh(labels, widths, left=left, color=COLORS[c], label=c)
        left = [x + w for x, w in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.legend(ncol=6, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
    out = _png(fig)
    plt.close(fig)
    return out


def memory_png(memory: dict[str, int]) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 1.4))
    left = 0.0
    colors = ("#4c8bf5", "#17becf", "#9467bd", "#e4572e")
    for part, color in zip(MEMORY_PARTS, colors, strict=True):
        mib = memory[part] / 2**20
        ax.barh(["peak"], [mib], left=left, color=color, label=f"{part.replace('_', ' ')} {mib:.1f} MiB")
        left += mib
    ax.set_xlabel("MiB")
    ax.legend(ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
    out = _png(fig)
    plt.close(fig)
    return out


def _unprofiled(report: DoctorReport) -> str:
    u = report.facts.unprofiled_step_seconds
    return f" (unprofiled: {min(u) * 1e3:.2f} ms; the profiler inflates times, read the shares)" if u else ""


def write_doctor_html(report: DoctorReport, path: str | Path) -> Path:
    """Write one self-contained HTML file (plots embedded); returns its path."""
    a, e = report.analysis, html.escape
    rows = "".join(f"<tr><td>{c}</td><td>{a.seconds(c) * 1e3:.2f} ms</td><td>{a.share(c):.0%}</td></tr>"
                   for c in CATEGORIES)
    ops = "".join(f"<tr><td>{e(o.name)}</td><td>{e(o.shapes)}</td><td>{o.count}</td>"
                  f"<td>{o.self_seconds * 1e3:.2f} ms</td></tr>" for o in a.top_ops)
    if a.top_kernels:
        ops += "<tr><th colspan=4>GPU kernels by device time</th></tr>" + "".join(
            f"<tr><td colspan=2>{e(k.name)}</td><td>{k.count}</td><td>{k.self_seconds * 1e3:.2f} ms</td></tr>"
            for k in a.top_kernels)
    findings = "".join(
        f"<section class='f {f.severity}'><h3>{f.severity}: {e(f.rule)} · {e(f.title)}</h3><ul>"
        + "".join(f"<li>{e(x)}</li>" for x in f.evidence)
        + f"</ul><p><b>Expected gain:</b> {e(f.expected_gain)}</p><pre>{e(f.fix)}</pre></section>"
        for f in report.findings) or "<p>No rule fired on these measurements.</p>"
    verified = "".join(f"<li>{e(v.rule)} ({e(v.plan)}): " + (e(v.error) if v.error else
                       "not measured" if v.baseline_seconds is None or v.fixed_seconds is None else
                       f"{v.baseline_seconds * 1e3:.2f} → {v.fixed_seconds * 1e3:.2f} ms/step, {v.speedup:.2f}x")
                       + "</li>" for v in report.verified)
    memory = ""
    if report.memory:
        memory = (f"<h2>Memory (peak {report.memory['peak'] / 2**20:.1f} MiB)</h2>"
                  f"<img alt='memory split' src='data:image/png;base64,{memory_png(report.memory)}'>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>torchsmith doctor: {e(report.target)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse}}td,th{{padding:2px 10px;border-bottom:1px solid #ddd}}
pre{{background:#f4f4f4;padding:8px;overflow:auto}}.f{{border-left:4px solid #999;padding-left:10px;margin:1em 0}}
.high{{border-color:#d62728}}.medium{{border-color:#ff7f0e}}.low{{border-color:#17becf}}</style></head><body>
<h1>torchsmith doctor</h1>{f"<p><b>Note:</b> {e(window_note(report))}</p>" if window_note(report) else ""}<p>{e(report.target)} · {e(report.facts.device)} · {e(report.facts.model)} ·
median step {a.step_seconds * 1e3:.2f} ms over {len(a.steps)} recorded steps{_unprofiled(report)}</p>
<h2>Step-time breakdown</h2><img alt="step time breakdown" src="data:image/png;base64,{breakdown_png(report)}">
<table><tr><th>phase</th><th>median</th><th>share</th></tr>{rows}</table>
{memory}<h2>Findings</h2>{findings}{f"<h2>Verified</h2><ul>{verified}</ul>" if verified else ""}
<h2>Top operators by self time</h2><table><tr><th>operator</th><th>input shapes</th><th>calls</th><th>self</th></tr>{ops}</table>
<p><small>Capture: {e(report.trace_note)}. Trace: {e(str(report.trace_path or "not kept (pass --trace)"))}.</small></p>
</body></html>"""  # noqa: E501 - the page's HTML lines are kept as written
    return atomic_write_text(path, page)
