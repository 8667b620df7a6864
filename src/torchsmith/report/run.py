"""Render a ``RunResult``: the summary table, and the same as JSON-ready data."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchsmith.engine.loop import RunResult
from torchsmith.report.console import fmt_bytes, fmt_rate, fmt_seconds


def run_to_dict(result: RunResult) -> dict[str, Any]:
    return {
        "workload": result.workload,
        "device": result.device,
        "plan": result.plan.to_dict(),
        "start_step": result.start_step,
        "end_step": result.end_step,
        "losses": result.losses,
        "val_losses": [{"step": s, "loss": v} for s, v in result.val_losses],
        "final_loss": result.final_loss,
        "final_val_loss": result.final_val_loss,
        "throughput": result.throughput,
        "throughput_unit": result.throughput_unit,
        "step_seconds_median": result.phases.step_median,
        "first_step_seconds": result.first_step_seconds,
        "phase_seconds_median": result.phases.median,
        "resumed_from": str(result.resumed_from) if result.resumed_from else None,
        "resume_note": result.resume_note,
        "skipped_checkpoints": [{"path": str(p), "reason": r} for p, r in result.skipped_checkpoints],
        "checkpoints": [str(p) for p in result.checkpoints],
        "changes": result.changes,
        "metrics": result.metrics,
    }


def render_run(result: RunResult, console: Console) -> None:
    for path, reason in result.skipped_checkpoints:
        console.print(f"[yellow]skipped checkpoint[/] {escape(str(path))}: {escape(reason)}")
    if result.resume_note:
        console.print(f"[yellow]note:[/] {escape(result.resume_note)}")
    if result.resumed_from:
        console.print(f"resumed from {escape(str(result.resumed_from))} at step {result.start_step}")
    table = Table(title=f"torchsmith run · {result.workload} · {result.device} · plan: {result.plan.describe()}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    m = result.metrics
    unit = result.throughput_unit.removesuffix("/s")
    rows = [
        ("steps", f"{result.start_step + 1}..{result.end_step}" if result.losses else "none (already done)"),
        ("throughput (median)", fmt_rate(result.throughput, unit + "/s")),
        ("step time (median)", fmt_seconds(result.phases.step_median)),
        ("first step (incl. compile)", fmt_seconds(result.first_step_seconds)),
        ("  data / forward / backward / optimizer",
         " / ".join(fmt_seconds(result.phases.median[p]) for p in ("data", "forward", "backward", "optimizer"))),
        ("MFU", f"{m['mfu']:.1%}" if m.get("mfu") is not None else "-"),
        ("  FLOPs per step", f"{m['flops_per_step'] / 1e9:.2f} GFLOP" if m.get("flops_per_step") else "-"),
        ("  machine peak", fmt_rate(m.get("peak_flops_per_s"), "FLOP/s")),
        ("peak memory", fmt_bytes(m.get("peak_memory_bytes"))),
        ("final train loss", f"{result.final_loss:.4f}" if result.final_loss is not None else "-"),
        ("final val loss", f"{result.final_val_loss:.4f}" if result.final_val_loss is not None else "-"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if result.checkpoints:
        console.print(f"checkpoints written by this run: {len(result.checkpoints)}, newest {result.checkpoints[-1]}",
                      style="dim")
