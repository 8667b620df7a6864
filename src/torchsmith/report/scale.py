"""Terminal table of ``tune --nproc-per-node``'s scale rows: each strategy predicted and measured."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torchsmith.distributed.scale_model import ScaleRow
from torchsmith.report.console import console, fmt_bytes

COLUMNS = ("ranks", "strategy", "step predicted", "measured", "error", "peak / rank predicted", "measured", "error")


def row_cells(row: ScaleRow) -> list[str]:
    """One scale row as the cells of ``COLUMNS`` (the terminal's table and the HTML report's)."""
    step_err, peak_err = row.step_error(), row.peak_error()
    return [str(row.ranks), row.strategy, f"{row.predicted_step_seconds * 1e3:.1f} ms",
            f"{row.measured_step_seconds * 1e3:.1f} ms" if row.measured_step_seconds else "-",
            f"{step_err:+.0%}" if step_err is not None else "-", fmt_bytes(row.predicted_peak_bytes),
            fmt_bytes(row.measured_peak_bytes) if row.measured_peak_bytes else "-",
            f"{peak_err:+.0%}" if peak_err is not None else "-"]


def render_scale(rows: list[ScaleRow], *, ranks: int, interconnect: str | None, out: Console = console) -> None:
    """One row per strategy and rank count; predicted beside measured where the search ran it."""
    if not rows:
        return
    table = Table(title=f"scale model: per-rank step time and peak memory (measured on {ranks} ranks here; "
                        f"past that predicted over {interconnect or 'an assumed link'}, assumed)")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for row in rows:
        table.add_row(*row_cells(row))
    out.print(table)
    out.print(f"[dim]past {ranks} ranks each rank keeps the micro-batch it has at {ranks} (the global batch grows "
              "with the ranks).[/]")
    out.print("[dim]what the model leaves out (stragglers, topology, NCCL's tree algorithms, compute slowed by "
              "communication, mixed precision): docs/scaling.md, 'Predicting N ranks from one'.[/]")
