"""The loss guard for script runs: the workload guard's rule (``GuardConfig.loss_rtol`` over the
first ``GuardConfig.steps`` steps) applied to the per-step losses a script run recorded.

A script run has no parameters to hand back, so only the losses are compared. A non-finite loss
where the baseline's is finite is a rejection, whatever the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchsmith.tuner.guard import GuardConfig

REPRODUCIBLE_RTOL = 1e-6
"""Two runs of the same code with the same seeds differ by less than this: float sums in the same
order give the same bits, so anything above it is real run-to-run variation."""


@dataclass(frozen=True)
class BaselineSpread:
    """How far the losses of two as-written runs differ, step by step."""

    max_rel_diff: float
    worst_step: int
    """0-based step where the difference is largest."""
    steps: int

    @property
    def reproducible(self) -> bool:
        return self.max_rel_diff <= REPRODUCIBLE_RTOL


def _rel(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return 0.0 if a == b else math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def baseline_spread(first: list[float], second: list[float]) -> BaselineSpread:
    diffs = [_rel(a, b) for a, b in zip(second, first, strict=False)]
    if not diffs:
        return BaselineSpread(0.0, 0, 0)
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    return BaselineSpread(diffs[worst], worst, len(diffs))


def script_guard_rejection(
    losses: list[float], reference: list[float], cfg: GuardConfig
) -> tuple[str | None, float | None]:
    """(why ``losses`` fail the guard against ``reference``, or None; the largest relative difference)."""
    n = min(len(losses), len(reference), cfg.steps)
    if n == 0:
        return "no losses recorded: the script never passed a scalar to backward()", None
    for i in range(n):
        if math.isfinite(reference[i]) and not math.isfinite(losses[i]):
            return f"loss is {losses[i]} at step {i + 1} where the baseline's is {reference[i]:.4g}", math.inf
    diffs = [_rel(a, b) for a, b in zip(losses[:n], reference[:n], strict=False)]
    worst = max(diffs)
    if worst > cfg.loss_rtol:
        step = diffs.index(worst)
        return (
            f"loss differs from the baseline by up to {worst:.2%} (step {step + 1}: {losses[step]:.4g} vs "
            f"{reference[step]:.4g}) over {n} steps (tolerance {cfg.loss_rtol:.2%})"
        ), worst
    return None, worst
