"""Terminal rendering of a tuning run: progress bar and summary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from torchsmith.measure.intervals import SpeedupInterval
from torchsmith.report.console import console, fmt_bytes, fmt_rate
from torchsmith.report.scale import render_scale
from torchsmith.tuner.result import TuneResult
from torchsmith.tuner.search import TuneProgress


@contextmanager
def tune_progress(quiet: bool = False, out: Console = console) -> Iterator[Any]:
    """A progress callback: candidates done, the knob being measured, the best so far, budget left.
    ``out``: where it draws (``tune --json`` keeps stdout for the JSON object)."""
    if quiet:
        yield None
        return
    progress = Progress(TextColumn("[bold]tune[/] {task.fields[knob]:<13}"), BarColumn(),
                        TextColumn("{task.completed:.0f}/{task.total:.0f} candidates"),
                        TextColumn("best: {task.fields[best]}"), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn(), TextColumn("({task.fields[budget]})"), console=out)
    task = progress.add_task("tune", total=1, knob="", best="", budget="")

    def update(p: TuneProgress) -> None:
        speed = f" ({p.best_speedup:.2f}x)" if p.best_speedup else ""
        progress.update(task, total=p.total, completed=p.done, knob=p.knob, best=p.best + speed,
                        budget=f"{p.budget:.0f} s budget")

    with progress:
        yield update


def render_tune(r: TuneResult, out: Console = console, top: int = 8) -> None:
    for note in r.notes:
        out.print(f"[yellow]note:[/] {note}")
    summary = Table(title=f"torchsmith tune · {r.workload} · {r.device}", show_header=False)
    summary.add_column(justify="left")
    summary.add_column(justify="right")
    summary.add_row("tuned plan", r.plan.describe())
    summary.add_row("speedup vs as written (re-measured side by side; the interval is where a fresh "
                    "re-measurement lands, 95 times in 100)", speedup_text(r))
    if r.noise is not None:
        summary.add_row("noise (as written against itself)", r.noise.describe())
    summary.add_row("throughput", f"{fmt_rate(r.throughput(r.baseline), r.throughput_unit)} -> "
                                  f"{fmt_rate(r.throughput(r.best), r.throughput_unit)}")
    summary.add_row("peak memory", f"{fmt_bytes(r.baseline.peak_memory_bytes)} -> {fmt_bytes(r.best.peak_memory_bytes)}"
                    + (f" ({r.best.memory_ratio:.2f}x)" if r.best.memory_ratio else ""))
    if r.baseline_mfu is not None and r.best_mfu is not None:
        summary.add_row("MFU (of this machine's measured matmul peak)", f"{r.baseline_mfu:.0%} -> {r.best_mfu:.0%}")
    summary.add_row("search time", f"{r.elapsed_seconds:.0f} s of {r.budget_seconds:.0f} s budget, "
                                   f"{r.warmup_steps} warm-up + {r.timed_steps} timed steps (pairs) per candidate "
                                   "and round")
    out.print(summary)

    ranked = sorted((c for c in r.candidates if c.speedup), key=lambda c: -(c.speedup or 0))[:top]
    table = Table(title="top candidates (speed vs the baseline measured beside them)")
    numeric = ("speed", "95% interval", "memory", "loss diff")
    for col in ("status", "change tried", *numeric[:2], "pairs", *numeric[2:], "note"):
        table.add_column(col, justify="right" if col in (*numeric, "pairs") else "left")
    style = {"accepted": "green", "rejected": "red", "failed": "yellow", "not distinguishable": "yellow"}
    for c in ranked + [c for c in r.candidates if c.status == "failed"]:
        table.add_row(f"[{style.get(c.status, 'dim')}]{c.status}[/]", c.change,
                      f"{c.speedup:.2f}x" if c.speedup else "-", interval_range(c.interval),
                      str(c.interval.pairs) if c.interval else "-",
                      f"{c.memory_ratio:.2f}x" if c.memory_ratio else "-",
                      f"{c.loss_rel_diff:.1e}" if c.loss_rel_diff is not None else "-", _first_sentence(c.reason))
    out.print(table)
    for c in r.candidates:
        if c.status == "n/a":
            out.print(f"[dim]does not apply: {c.change}: {_first_sentence(c.reason, 120)}[/]")
    for knob, why in r.skipped:
        out.print(f"[dim]not searched: {knob}: {why}[/]")
    render_scale(r.scale, ranks=r.ranks, interconnect=r.interconnect, out=out)


def speedup_text(r: TuneResult) -> str:
    """'1.38x (95% interval 1.29-1.47, 8 pairs)', or why there is no interval."""
    if r.as_written:
        return "1.00x (the as-written plan: nothing to change)"
    if r.speedup_interval is not None:
        decided = (f"; decided on the true ratio's 95% interval {r.decided_by.low:.2f}-{r.decided_by.high:.2f}"
                   if r.decided_by is not None else "")
        return r.speedup_interval.describe() + decided
    return f"{r.speedup or 1:.2f}x"


def interval_range(iv: SpeedupInterval | None) -> str:
    if iv is None:
        return "-"
    return f"{iv.low:.2f}-{iv.high:.2f}" if iv.bounded else "unbounded"


def _first_sentence(text: str, limit: int = 90) -> str:
    text = text.split(":", 1)[1].strip() if text.startswith(("TransformError:", "RuntimeError:")) else text
    first = text.split(". ")[0].split("\n")[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"
