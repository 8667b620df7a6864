"""A rich progress bar for ``run``: step, loss, throughput and ETA."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from torchsmith.engine.loop import RunCallbacks, StepInfo
from torchsmith.report.console import console, fmt_rate


@contextmanager
def run_progress(description: str, unit: str, quiet: bool = False) -> Iterator[RunCallbacks]:
    """Callbacks that drive a progress bar; ``quiet`` renders nothing (for --json)."""
    if quiet:
        yield RunCallbacks()
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False,
    )
    task = progress.add_task(description, total=None, loss="-", rate="")

    def on_start(start: int, total: int) -> None:
        progress.update(task, total=total, completed=start)

    def on_step(info: StepInfo) -> None:
        fields: dict[str, Any] = {"rate": fmt_rate(info.items_per_s, unit)}
        if info.loss is not None:
            fields["loss"] = f"{info.loss:.4f}"
        progress.update(task, completed=info.step, **fields)

    def on_eval(step: int, val: float) -> None:
        progress.console.print(f"  step {step}: val loss {val:.4f}")

    def on_checkpoint(path: Path) -> None:
        progress.console.print(f"  checkpoint {path}", style="dim")

    with progress:
        yield RunCallbacks(on_start=on_start, on_step=on_step, on_eval=on_eval, on_checkpoint=on_checkpoint)
