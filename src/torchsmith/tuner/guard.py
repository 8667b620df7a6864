"""The numerical-equivalence guard: a faster plan only counts if it trains the same."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torchsmith.harness.compare import PlanMeasurement


@dataclass(frozen=True, kw_only=True)
class GuardConfig:
    """Tolerances against the as-written baseline, over the same seed and batches."""

    loss_rtol: float = 0.02
    """Largest allowed |loss - baseline loss| / |baseline loss| at any measured step. Plans that
    only reorder float sums differ by ~1e-6; bf16 autocast typically by 1e-3 to 1e-2."""
    param_rtol: float = 0.15
    """Largest allowed ||params - baseline params|| / ||baseline params - initial params|| after
    ``steps`` steps: the parameters' distance, relative to how far training moved them."""
    steps: int = 14
    """Steps compared, from the first (warm-up included). Fixed, because two runs that round
    differently drift apart as training goes on: a fast workload timed over hundreds of steps
    must not face a stricter guard than a slow one timed over a dozen."""


def guard_rejection(m: PlanMeasurement, cfg: GuardConfig) -> str | None:
    """Why ``m`` fails the guard, with the measured numbers; None when it passes.

    Every test is written as "not within tolerance", so a NaN figure fails it: ``nan > tol``
    is false, and a guard written ``x > tol`` would accept a candidate that diverged.
    """
    bad = next(((i, v) for i, v in enumerate(m.losses[:cfg.steps]) if not math.isfinite(v)), None)
    if bad is not None:
        return (f"loss is non-finite ({bad[1]}) at step {bad[0] + 1}: "
                "the candidate diverged (e.g. low precision overflowed or rounded a probability to 1)")
    if m.loss_rel_diff is not None and not m.loss_rel_diff <= cfg.loss_rtol:
        if math.isnan(m.loss_rel_diff):
            return ("loss cannot be compared with the baseline: a non-finite loss in one run or both "
                    "(NaN against NaN is no match either)")
        return (f"loss differs from the baseline by up to {m.loss_rel_diff:.2%} "
                f"over {len(m.losses)} steps (tolerance {cfg.loss_rtol:.2%})")
    if m.param_rel_diff is not None and not m.param_rel_diff <= cfg.param_rtol:
        if math.isnan(m.param_rel_diff):
            return "final parameters are non-finite (NaN or Inf) where the baseline's are finite"
        return (f"final parameters differ from the baseline by {m.param_rel_diff:.2%} of the distance "
                f"training moved them (tolerance {cfg.param_rtol:.2%})")
    return None
