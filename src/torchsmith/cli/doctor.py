"""``torchsmith doctor``: say why training is slow, for a workload or an unmodified script."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, JsonOption, shell_exit_code, user_errors


@app.command("doctor")
def doctor_command(
    target: Optional[list[str]] = typer.Argument(
        None, help=WORKLOAD_HELP + " Default: gpt-mini. Or, after --, a command: -- python train.py --its --args"),
    steps: int = typer.Option(3, "--steps", min=1, max=20,
                              help="Steps to record (1-20) after 1 first, 1 wait and 1 warm-up step."),
    report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report here."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Keep the Chrome/Perfetto trace here (size-capped)."),
    verify: bool = typer.Option(False, "--verify", help="Workloads: re-measure each fix that maps to a plan knob."),
    stop_after: bool = typer.Option(False, "--stop-after",
                                    help="Scripts: stop the script once the window is recorded."),
    max_trace_mb: float = typer.Option(200.0, "--max-trace-mb", min=1.0, help="Cap on the kept trace file."),
    probe_threads: bool = typer.Option(True, "--probe-threads/--no-probe-threads",
                                       help="CPU: after the window, time up to 12 more steps at suspected "
                                            "thread counts."),
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
) -> None:
    """Profile a few training steps and report where the time goes, with findings and fixes.

    \b
    torchsmith doctor mlp --report doctor.html --trace trace.json
    torchsmith doctor --steps 5 -- python train.py --lr 3e-4
    """
    from torchsmith.cli.run_script import is_command
    from torchsmith.inject.env import python_command
    from torchsmith.profile.capture import CaptureConfig
    from torchsmith.profile.doctor import DoctorError, doctor_script, doctor_workload
    from torchsmith.profile.doctor import verify as verify_fixes
    from torchsmith.report.console import console, error_console
    from torchsmith.report.doctor import doctor_to_dict, render_doctor, write_doctor_html
    from torchsmith.workload import load_workload

    args = list(target or [])
    with user_errors():
        cfg = CaptureConfig(active=steps, stop_after=stop_after, max_trace_mb=max_trace_mb, probe_threads=probe_threads)
        if is_command(args):  # the rule run and tune use: `doctor nope` says no workload has that name
            if verify:
                raise ValueError("--verify re-runs a workload with a fix applied; it cannot edit a script.\n"
                                 "Tip: apply the fix shown in the script, or describe it as a workload "
                                 "(mymod:workload).")
            try:
                result = doctor_script(python_command(args), cfg, trace=trace)
            except DoctorError as err:
                error_console.print(f"error: {err}", highlight=False, markup=False)
                code = getattr(err, "exit_code", 0)
                raise typer.Exit(shell_exit_code(code) if code else 2) from None
        else:
            w = load_workload(args[0] if args else None)
            with console.status(f"profiling {w.name}: {cfg.steps_needed} steps", spinner="dots") \
                    if not as_json else nullcontext():
                result = doctor_workload(w, cfg, device=None if device == "auto" else device, trace=trace)
            if verify:
                _verify(w, result, verify_fixes, as_json)
    if as_json:
        typer.echo(json.dumps(doctor_to_dict(result), indent=2))
    else:
        render_doctor(result, console)
    if report:
        write_doctor_html(result, report)
        if not as_json:
            console.print(f"report: {report}", style="dim")
    if result.exit_code:
        raise typer.Exit(shell_exit_code(result.exit_code))  # the script's own code passes through


def _verify(workload, result, verify_fixes, quiet: bool) -> None:
    from rich.progress import Progress

    from torchsmith.report.console import console

    if not any(f.verify_plan is not None for f in result.findings):
        return
    with Progress(console=console, transient=True, disable=quiet) as progress:
        task = progress.add_task("verifying fixes", total=None)
        verify_fixes(workload, result, on_step=lambda done, total: progress.update(task, completed=done, total=total))
