"""``torchsmith tune``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, user_errors


@app.command("tune")
def tune_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    budget: str = typer.Option("5m", "--budget", help="Wall-clock budget for the whole search, e.g. 90s, 5m, 1h."),
    memory_limit: Optional[str] = typer.Option(None, "--memory-limit", help="Reject plans whose measured peak exceeds this, e.g. 8GB, 512MiB."),
    out: Path = typer.Option(Path("plan.json"), "--out", help="Where to write the winning plan."),
    report: Optional[Path] = typer.Option(Path("report.html"), "--report", help="Self-contained HTML report."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda or auto."),
    knobs: Optional[str] = typer.Option(None, "--knobs", help="Search only these knobs, comma-separated, e.g. threads,compile."),
) -> None:
    """Find the fastest plan for WORKLOAD that keeps the loss unchanged, prove it, write plan.json."""
    from torchsmith.report.console import console
    from torchsmith.report.tune import render_tune, tune_progress
    from torchsmith.report.tune_html import write_report
    from torchsmith.tune import WorkloadStepError, tune

    with user_errors():
        try:
            with tune_progress() as progress:
                result = tune(workload, budget=budget, memory_limit=memory_limit, out=out,
                              device=device, knobs=knobs.split(",") if knobs else None, on_progress=progress)
        except WorkloadStepError as err:
            raise ValueError(str(err)) from None
    report_path = write_report(result, report) if report and report != Path("") else None  # --report "": none
    render_tune(result, console)
    console.print(f"plan written to [bold]{out}[/]" + (f", report to [bold]{report_path}[/]" if report_path else ""))
    console.print(f"use it: torchsmith run {workload or 'gpt-mini'} --plan {out}   or   "
                  "torchsmith.prepare(Plan.load(...), model, optimizer, loss_fn)")
