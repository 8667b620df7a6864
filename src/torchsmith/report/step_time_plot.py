"""Step-time distributions drawn side by side (box plots), for the HTML reports.

A ratio says which plan is faster; the distributions say how much the steps vary and whether a
few slow steps (a burst of load, a recompile) drive it. Bars alone hide both.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchsmith.report.html import figure_to_img


def step_time_boxes(series: Sequence[tuple[str, Sequence[float]]], title: str) -> str:
    """``series`` as (label, step seconds) drawn as horizontal box plots in milliseconds, each step a dot.

    Example::

        step_time_boxes([("as written", base_times), ("tuned", tuned_times)], "proof")
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [(label, [t * 1e3 for t in times]) for label, times in series if times]
    if not shown:
        return "<p>no step times recorded</p>"
    fig, ax = plt.subplots(figsize=(8, 0.8 * len(shown) + 1.2))
    ax.boxplot([ms for _, ms in shown], vert=False, widths=0.5, showfliers=False)
    for row, (_, ms) in enumerate(shown, start=1):
        # Every step as a dot, slightly spread vertically so that equal times stay visible.
        ax.scatter(ms, [row + 0.12 * ((i % 5) - 2) / 2 for i in range(len(ms))], s=9, alpha=0.6, color="#0969da")
    ax.set_yticks(range(1, len(shown) + 1), [f"{label} ({len(ms)} steps)" for label, ms in shown], fontsize=8)
    ax.set_xlabel("step time (ms)")
    ax.set_title(title, fontsize=9)
    return figure_to_img(fig, title)
