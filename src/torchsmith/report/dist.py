"""Terminal rendering for ``torchsmith launch`` and ``torchsmith debug desync``."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchsmith.distributed.desync import DesyncReport


def render_launch(cmd: list[str], notes: list[str], console: Console, dry_run: bool = False) -> None:
    """The exact torchrun command, copy-pastable, then the notes (warnings in yellow)."""
    console.print(f"[bold]{'command' if dry_run else 'running'}:[/] {escape(shlex.join(cmd))}", soft_wrap=True)
    for note in notes:
        style = "yellow" if note.startswith("warning") else "dim"
        console.print(f"[{style}]{escape(note)}[/]", soft_wrap=True)


def render_desync(report: DesyncReport, console: Console) -> None:
    if report.in_sync:
        console.print(f"[green]in sync:[/] {report.checked} tensors bit-identical on {report.world_size} ranks")
        return
    table = Table(title=f"{len(report.mismatches)} of {report.checked} tensors differ across "
                        f"{report.world_size} ranks")
    table.add_column("parameter")
    table.add_column("differing ranks")
    table.add_column("checksum per rank", overflow="fold")
    for m in report.mismatches:
        table.add_row(m.name, ", ".join(map(str, m.ranks)), " ".join(f"{c & 0xFFFFFFFF:08x}" for c in m.checksums))
    console.print(table)
    console.print("Tip: replicas drift when a rank skips a step alone, runs rank-dependent code outside DDP, "
                  "or loads a different checkpoint; `torchsmith debug nan` and the run's logs show which step.")
