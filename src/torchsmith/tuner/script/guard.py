"""The loss guard for script runs: the workload guard's rule (``GuardConfig.loss_rtol`` over the
first ``GuardConfig.steps`` steps) applied to the per-step losses a script run recorded.

A script run has no parameters to hand back, so only the losses are compared, with the workload
harness's own comparison (``harness/loss_guard.py``): a non-finite loss where the baseline's is
finite is a rejection whatever the tolerance, and so is NaN against NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchsmith.harness.loss_guard import compare_losses
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


def baseline_spread(first: list[float], second: list[float]) -> BaselineSpread:
    """How far two as-written runs' losses differ. Both diverging at the same step is agreement up to
    there (the guard then rejects every candidate against it); only one diverging is an Inf spread."""
    c = compare_losses(second, first)
    if c.steps == 0:
        return BaselineSpread(0.0, 0, 0)
    step = c.nonfinite_step if c.spread == math.inf else c.worst_step
    return BaselineSpread(c.spread, step or 0, c.steps)


def script_guard_rejection(
    losses: list[float], reference: list[float], cfg: GuardConfig
) -> tuple[str | None, float | None]:
    """(why ``losses`` fail the guard against ``reference``, or None; the largest relative difference).

    The difference is Inf when one run's loss is non-finite where the other's is finite, and NaN
    when both are (see ``harness/loss_guard.py``: neither is ever a pass)."""
    c = compare_losses(losses, reference, steps=cfg.steps)
    if c.steps == 0:
        return "no losses recorded: the script never passed a scalar to backward()", None
    reason = c.nonfinite_reason()
    if reason is not None:
        return reason, math.nan if c.nonfinite == "both" else math.inf
    worst = c.max_rel_diff
    if worst > cfg.loss_rtol:
        step = c.worst_step or 0
        return (
            f"loss differs from the baseline by up to {worst:.2%} (step {step + 1}: {losses[step]:.4g} vs "
            f"{reference[step]:.4g}) over {c.steps} steps (tolerance {cfg.loss_rtol:.2%})"
        ), worst
    return None, worst
