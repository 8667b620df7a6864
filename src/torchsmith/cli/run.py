"""``torchsmith run``: train a workload under a plan."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, JsonOption, user_errors


@app.command("run")
def run_command(
    target: Optional[list[str]] = typer.Argument(
        None,
        help=WORKLOAD_HELP + " Default: gpt-mini. Or, after --, a command run to completion with the plan "
        "injected: --plan plan.json -- python train.py --its --args",
    ),
    plan: Optional[Path] = typer.Option(None, "--plan", help="plan.json from `torchsmith tune`; default: as written."),
    steps: int = typer.Option(
        100, "--steps", min=1, help="Total optimizer steps of the run (a resume continues up to this)."
    ),
    eval_every: Optional[int] = typer.Option(
        None, "--eval-every", min=1, help="Validation loss every K steps (and at the end)."
    ),
    checkpoint_dir: Optional[Path] = typer.Option(None, "--checkpoint-dir", help="Write checkpoints here."),
    checkpoint_every: Optional[int] = typer.Option(
        None, "--checkpoint-every", min=1, help="Checkpoint every K steps (always at the end)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from the newest good checkpoint in --checkpoint-dir."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete the checkpoints already in --checkpoint-dir and start a fresh run."
    ),
    force: bool = typer.Option(
        False, "--force", help="With --resume: load a checkpoint even if another workload or plan wrote it."
    ),
    allow_nonfinite: bool = typer.Option(
        False, "--allow-nonfinite", help="Exit 0 even if the final loss is non-finite or every step was skipped."
    ),
    device: DeviceOption = "auto",
    keep_last_k: int = typer.Option(3, "--keep-last-k", min=1, help="Keep only the newest K checkpoints."),
    async_checkpoint: bool = typer.Option(
        False, "--async-checkpoint", help="Under torchrun: write DCP checkpoints in the background."
    ),
    as_json: JsonOption = False,
) -> None:
    """Train WORKLOAD with a plan: progress bar, exact checkpoint and resume, and a summary table.

    With --checkpoint-dir, SIGTERM or SIGUSR1 ends training after the current step, saves it and
    exits 143 or 138; --resume continues from it. Under `torchsmith launch`, a restarted worker
    resumes its own run's newest checkpoint with no flag.

    \b
    torchsmith run gpt-mini --plan plan.json --steps 200
    torchsmith run --plan plan.json -- python train.py --lr 3e-4   (exit code passed through)
    """
    from torchsmith.cli.run_script import is_command

    args = list(target or [])
    if is_command(args):
        from torchsmith.cli.run_script import run_script_command

        raise typer.Exit(run_script_command(args, plan))
    workload = args[0] if args else None
    from torchsmith.engine.loop import RunFailedError, run
    from torchsmith.engine.preemption import Preempted
    from torchsmith.harness.run_metrics import measure_run_metrics
    from torchsmith.plan import Plan
    from torchsmith.report.console import console, error_console
    from torchsmith.report.progress import run_progress
    from torchsmith.report.run import render_run, run_to_dict
    from torchsmith.workload import load_workload

    # Under torchrun every rank runs this command; only rank 0 shows progress and results.
    rank_zero = int(os.environ.get("RANK", "0")) == 0
    failure = None
    with user_errors():
        w = load_workload(workload)
        p = Plan.load(plan) if plan else Plan()
        eval_every = eval_every or max(1, steps)  # at least a final validation loss
        with run_progress(f"{w.name}", w.throughput_unit[0] + "/s", quiet=as_json or not rank_zero) as callbacks:
            try:
                result = run(
                    w,
                    p,
                    steps=steps,
                    eval_every=eval_every,
                    checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every,
                    resume=resume,
                    overwrite=overwrite,
                    force=force,
                    device=device,
                    callbacks=callbacks,
                    keep_last_k=keep_last_k,
                    async_checkpoint=async_checkpoint,
                    allow_nonfinite=allow_nonfinite,
                )
            except RunFailedError as err:  # trained, but to nothing usable: show what happened, then fail
                result, failure = err.result, err
            except Preempted as stopped:
                # SIGTERM/SIGUSR1: the step under way finished and was saved; the library logged where.
                # Exit as a shell reports that signal (143, 138), so schedulers see a preemption.
                raise typer.Exit(stopped.exit_code) from None
        result.metrics.update(measure_run_metrics(w, result))
    if rank_zero:
        if as_json:
            typer.echo(json.dumps({**run_to_dict(result), "error": str(failure) if failure else None}, indent=2))
        else:
            render_run(result, console)
    if failure is not None:
        if rank_zero:
            error_console.print(f"error: {failure}", markup=False, highlight=False)
        raise typer.Exit(1)
