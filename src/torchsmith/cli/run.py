"""``torchsmith run``: train a workload under a plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, user_errors


@app.command("run")
def run_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json from `torchsmith tune`; default: as written."),
    steps: int = typer.Option(100, "--steps", min=1, help="Total optimizer steps of the run (a resume continues up to this)."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", min=1, help="Validation loss every K steps (and at the end)."),
    checkpoint_dir: Optional[Path] = typer.Option(None, "--checkpoint-dir", help="Write checkpoints here."),
    checkpoint_every: Optional[int] = typer.Option(None, "--checkpoint-every", min=1, help="Checkpoint every K steps (always at the end)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the newest good checkpoint in --checkpoint-dir."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:1 or auto."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of a table."),
) -> None:
    """Train WORKLOAD with a plan: progress bar, exact checkpoint and resume, and a summary table."""
    from torchsmith.engine.loop import run
    from torchsmith.measure.run_metrics import measure_run_metrics
    from torchsmith.plan import Plan
    from torchsmith.report.console import console
    from torchsmith.report.progress import run_progress
    from torchsmith.report.run import render_run, run_to_dict
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        p = Plan.load(plan) if plan else Plan()
        eval_every = eval_every or max(1, steps)  # at least a final validation loss
        with run_progress(f"{w.name}", w.throughput_unit[0] + "/s", quiet=as_json) as callbacks:
            result = run(w, p, steps=steps, eval_every=eval_every, checkpoint_dir=checkpoint_dir,
                         checkpoint_every=checkpoint_every, resume=resume, device=device, callbacks=callbacks)
        result.metrics.update(measure_run_metrics(w, result))
    if as_json:
        typer.echo(json.dumps(run_to_dict(result), indent=2))
    else:
        render_run(result, console)
