"""Rendering for ``torchsmith data``: pack summary, verify report, loader tuning table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from torchsmith.report.console import fmt_bytes, fmt_seconds


def render_pack(index: Any, dest: Path, seconds: float, console: Console) -> None:
    shape = "ragged 1-D" if index.shape is None else "x".join(map(str, index.shape)) or "scalar"
    console.print(f"[bold]packed[/] {index.num_samples} samples ({index.dtype}, {shape}) into "
                  f"{len(index.shards)} shard(s), {fmt_bytes(index.total_bytes)}, in {fmt_seconds(seconds)}")
    console.print(f"  store: {escape(str(dest))}")
    for key, value in index.meta.items():
        if key != "vocab":
            console.print(f"  {key}: {value}", style="dim")


def render_verify(report: Any, console: Console) -> None:
    if report.ok:
        console.print(f"[bold green]ok[/] {escape(str(report.path))}: {report.num_samples} samples, "
                      f"{report.files_checked} files, {fmt_bytes(report.bytes_checked)} checked in "
                      f"{fmt_seconds(report.seconds)}")
    else:
        console.print(f"[bold red]{len(report.problems)} problem(s)[/] in {escape(str(report.path))}:")
        for problem in report.problems:
            console.print(f"  - {escape(problem)}")
    for note in report.notes:
        console.print(f"  note: {escape(note)}", style="dim")


def render_upgrade(result: Any, console: Console) -> None:
    if not result.upgraded:
        console.print(f"{escape(str(result.path))} already has block checksums (format "
                      f"{result.index.format_version}): nothing to do")
        return
    console.print(f"[bold green]upgraded[/] {escape(str(result.path))} to format {result.index.format_version}: "
                  f"{fmt_bytes(result.bytes_hashed)} checked and re-hashed in blocks of "
                  f"{fmt_bytes(result.index.block_bytes)} in {fmt_seconds(result.seconds)}")


def render_tune(result: Any, console: Console, plan_path: Path | None = None) -> None:
    """Table of every measured loader, a bar per row, then the recommendation."""
    table = Table(title=f"DataLoader throughput, batch {result.samples_per_batch}, {result.cores} cores, "
                        f"{result.device} ({result.passes} x {result.batches} batches after warm-up)")
    justify: JustifyMethod
    for col, justify in (("workers", "right"), ("prefetch", "right"), ("persist", "center"), ("pin", "center"),
                         ("fetch", "left"), ("samples/s", "right"), ("ratio", "right"), ("", "left")):
        table.add_column(col, justify=justify, no_wrap=True)
    base = result.baseline.samples_per_s
    top = max(t.samples_per_s for t in result.trials)
    best = result.best
    for t in result.trials:
        a = t.args
        mark = " [bold green]best[/]" if t is best else (" as written" if a == result.written else "")
        table.add_row(
            str(a.num_workers), str(a.prefetch_factor) if a.num_workers else "-",
            ("yes" if a.persistent_workers else "no") if a.num_workers else "-", "yes" if a.pin_memory else "no",
            "batch" if a.batch_fetch else "sample", f"{t.samples_per_s:,.0f}", f"{t.samples_per_s / base:.2f}x",
            "[cyan]" + "█" * max(1, round(10 * t.samples_per_s / top)) + "[/]" + mark,
        )
    console.print(table)
    for note in result.notes:
        console.print(f"  note: {note}", style="dim")
    console.print(f"[bold]recommended:[/] {best.args.describe()}  ({result.speedup:.2f}x the loader as written)")
    if plan_path is not None:
        console.print(f"  wrote the loader section of {escape(str(plan_path))}; "
                      f"`torchsmith run --plan {escape(str(plan_path))}` uses it")


@contextmanager
def task_progress(description: str, console: Console, quiet: bool = False) -> Iterator[Callable[..., None]]:
    """A progress bar driven by ``update(done, total, label="")``."""
    if quiet:
        yield lambda *a, **k: None
        return
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[label]}"), TimeElapsedColumn(), console=console, transient=True)
    task = progress.add_task(description, total=None, label="")

    def update(done: int, total: int, label: str = "") -> None:
        progress.update(task, completed=done, total=total, label=label)

    with progress:
        yield update
