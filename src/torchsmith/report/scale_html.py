"""What the HTML report of ``tune --nproc-per-node`` adds: the strategies side by side, and the
scale model's curves with the points measured on this machine."""

from __future__ import annotations

from torchsmith.distributed.scale_model import STRATEGIES, ScaleRow
from torchsmith.report.console import fmt_bytes
from torchsmith.report.html import esc, figure_to_img, table
from torchsmith.report.scale import COLUMNS, row_cells
from torchsmith.tuner.result import TuneResult

_COLOURS = {"ddp": "#0969da", "zero1": "#1a7f37", "fsdp2": "#8250df"}


def scale_sections(r: TuneResult) -> list[str]:
    """Sections for a search on several ranks; none for one process."""
    if r.ranks < 2:
        return []
    return [_strategies(r), _curves(r) if r.scale else "<p>the scale model's inputs could not be measured</p>"]


def _strategies(r: TuneResult) -> str:
    at_n: dict[str, ScaleRow] = {row.strategy: row for row in r.scale if row.ranks == r.ranks}
    rows = []
    for c in [c for c in r.candidates if c.knob in ("baseline", "parallel")]:
        kind = c.plan.parallel.kind if c.knob == "parallel" else "ddp"
        model = at_n.get(kind)
        share = model.predicted_comm_share if model else None
        interval = f"{c.interval.low:.2f}-{c.interval.high:.2f}" if c.interval else "-"
        rows.append([c.change if c.knob == "parallel" else "DDP, PyTorch's defaults (as written)", c.status,
                     f"{c.step_seconds * 1e3:.1f} ms" if c.step_seconds else "-",
                     f"{c.speedup:.2f}x" if c.speedup else "-", interval, fmt_bytes(c.peak_memory_bytes),
                     f"{share:.0%}" if share is not None else "-"])
    return (f"<h2>Strategies side by side, on {r.ranks} ranks</h2><p class=sub>Each measured in the same torchrun "
            "job as DDP's defaults: the slowest rank's step, the largest rank's peak. The communication share is "
            "the scale model's (every collective, hidden or not, over compute plus every collective).</p>"
            + table(["strategy", "status", "step", "speed", "95% interval", "peak / rank", "comm share (model)"],
                    rows, numeric=(2, 3, 4, 5, 6)))


def _curves(r: TuneResult) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (steps_ax, peak_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for strategy in STRATEGIES:
        rows = sorted((row for row in r.scale if row.strategy == strategy), key=lambda row: row.ranks)
        colour = _COLOURS[strategy]
        steps_ax.plot([x.ranks for x in rows], [x.predicted_step_seconds * 1e3 for x in rows], "-o", color=colour,
                      label=f"{strategy} predicted", markersize=3)
        peak_ax.plot([x.ranks for x in rows], [x.predicted_peak_bytes / 2**20 for x in rows], "-o", color=colour,
                     label=f"{strategy} predicted", markersize=3)
        _measured(steps_ax, rows, colour, strategy, lambda x: x.measured_step_seconds, 1e3)
        _measured(peak_ax, rows, colour, strategy, lambda x: x.measured_peak_bytes, 1 / 2**20)
    for ax, label in ((steps_ax, "step time (ms)"), (peak_ax, "peak memory per rank (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel(label)
        ax.axvline(r.ranks, color="#8c959f", linestyle=":", linewidth=1)
    steps_ax.legend(fontsize=7)
    fig.tight_layout()
    return (f"<h2>Scaling: predicted, with the points measured here</h2><p class=sub>At {r.ranks} ranks the "
            "prediction uses the link fitted to the collectives measured on these ranks; past the dotted line, "
            f"the assumed interconnect {esc(r.interconnect)}, with each rank keeping the micro-batch it has at "
            f"{r.ranks} (the global batch grows). Crosses: measured by the search. What the model leaves out: "
            "docs/scaling.md.</p>" + figure_to_img(fig, "predicted step time and memory per rank against ranks")
            + _rows_table(r.scale))


def _measured(ax, rows: list[ScaleRow], colour: str, strategy: str, value, scale: float) -> None:
    points = [(x.ranks, value(x) * scale) for x in rows if value(x)]
    if points:
        ax.plot(*zip(*points, strict=True), "x", color=colour, markersize=9, label=f"{strategy} measured")


def _rows_table(rows: list[ScaleRow]) -> str:
    return table(list(COLUMNS), [row_cells(x) for x in rows], numeric=(0, 2, 3, 4, 5, 6, 7))
