"""``torchsmith bench``: side-by-side measurements on this machine (``bench tips``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from torchsmith.cli import app
from torchsmith.cli.common import WORKLOAD_HELP, DeviceOption, JsonOption, user_errors

bench = typer.Typer(help="Measure on this machine, side by side.", no_args_is_help=True)
app.add_typer(bench, name="bench")


@bench.command("tips")
def tips_command(
    workload: Optional[str] = typer.Argument(None, help=WORKLOAD_HELP + " Default: gpt-mini."),
    steps: int = typer.Option(6, "--steps", min=1, help="Timed steps per plan (median), after warm-up."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Untimed steps per plan first (compilation happens here)."),
    only: Optional[list[str]] = typer.Option(
        None, "--only", help="Measure only this transform (repeatable), e.g. --only checkpointing."),
    folklore: bool = typer.Option(True, "--folklore/--no-folklore", help="Also run the folklore checks."),
    device: DeviceOption = "auto",
    as_json: JsonOption = False,
    markdown: Optional[Path] = typer.Option(None, "--markdown",
                                            help="Also write the result as a markdown page (docs/tips.md)."),
) -> None:
    """Measure each registered transform alone against the eager fp32 baseline on WORKLOAD (speed,
    peak memory, loss difference), interleaved in one process; then check common folklore."""
    import shlex
    import sys

    from torchsmith.report.console import console
    from torchsmith.report.tips import render_tips, tips_to_dict, tips_to_markdown
    from torchsmith.tips import run_tips
    from torchsmith.workload import load_workload

    with user_errors():
        w = load_workload(workload)
        with _progress(quiet=as_json) as (on_step, on_check):
            report = run_tips(w, steps=steps, warmup=warmup, device=device, only=only, folklore=folklore,
                              on_step=on_step, on_check=on_check)
    if markdown is not None:
        command = "torchsmith " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(tips_to_markdown(report, command) + "\n")
    if as_json:
        typer.echo(json.dumps(tips_to_dict(report), indent=2))
    else:
        render_tips(report, console)
        if markdown is not None:
            console.print(f"wrote {markdown}", style="dim")


def _progress(quiet: bool):
    from contextlib import contextmanager

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from torchsmith.report.console import console

    @contextmanager
    def bar():
        if quiet:
            yield None, None
            return
        progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)
        task = progress.add_task("plans x steps", total=None)

        def on_step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        def on_check(name: str) -> None:
            progress.update(task, description=f"folklore: {name}", completed=0, total=None)

        with progress:
            yield on_step, on_check

    return bar()
