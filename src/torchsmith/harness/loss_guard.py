"""One comparison of two loss sequences, with the non-finite rule decided once.

The workload harness (``compare.py``) and the script guard (``tuner/script_guard.py``) both compare
a run's per-step losses with a baseline's; both use :func:`compare_losses`, so both read a NaN the
same way. Steps are compared in order up to the first step where either loss is non-finite (NaN or
+-Inf); that step decides:

- the candidate's loss is non-finite where the baseline's is finite: the candidate diverged, a
  rejection whatever the tolerance;
- the baseline's loss is non-finite where the candidate's is finite: the two runs do not train the
  same, a rejection;
- both are non-finite (NaN against NaN, Inf against Inf): both runs diverged there. That is no
  evidence that they train the same, and a speedup of a diverged run is worth nothing, so it is a
  rejection too. It is never a "difference of 0": ``rel_diff`` is NaN, which fails every
  ``not x <= tol`` test. Steps after it are not compared (there is nothing left to compare).

Two runs of the *same* code (the script tuner's reproducibility check) read the last case as
agreement up to that step: see :attr:`LossComparison.spread`.

Example::

    c = compare_losses([1.0, 0.5, math.nan], [1.0, 0.5, 0.4])
    c.nonfinite                       # 'candidate'
    c.rel_diff                        # nan: fails every tolerance
    c.nonfinite_reason()              # "loss is nan at step 3 where the baseline's is 0.4"
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

NonfiniteSide = Literal["candidate", "baseline", "both"]


def rel_diff(candidate: float, baseline: float) -> float:
    """|candidate - baseline| / |baseline|, for two finite losses (a zero baseline counts as 1e-12)."""
    return abs(candidate - baseline) / max(abs(baseline), 1e-12)


@dataclass(frozen=True, kw_only=True)
class LossComparison:
    """The step-by-step comparison of a candidate's losses with a baseline's."""

    steps: int
    """Steps compared: the shorter of the two sequences, capped at the ``steps`` asked for."""
    max_rel_diff: float
    """Largest :func:`rel_diff` over the finite steps before the first non-finite one; 0.0 when none."""
    worst_step: int | None
    """0-based step of ``max_rel_diff``; None when no finite step was compared."""
    nonfinite: NonfiniteSide | None = None
    """Which run's loss is non-finite at the first such step; None when every compared step is finite."""
    nonfinite_step: int | None = None
    """0-based step of the first non-finite loss (either run)."""
    candidate_loss: float | None = None
    """The candidate's loss at ``nonfinite_step``."""
    baseline_loss: float | None = None
    """The baseline's loss at ``nonfinite_step``."""

    @property
    def rel_diff(self) -> float:
        """``max_rel_diff``, or NaN when a non-finite loss was compared: a figure that never passes a tolerance."""
        return math.nan if self.nonfinite is not None else self.max_rel_diff

    @property
    def spread(self) -> float:
        """The difference between two runs of the same code: ``max_rel_diff`` when both diverge at the
        same step (they agree up to there), +Inf when only one of them does."""
        return math.inf if self.nonfinite in ("candidate", "baseline") else self.max_rel_diff

    def nonfinite_reason(self) -> str | None:
        """Why the non-finite rule rejects the candidate, with the step and both losses; None if it does not."""
        if self.nonfinite is None:
            return None
        step, cand, base = (self.nonfinite_step or 0) + 1, self.candidate_loss, self.baseline_loss
        if self.nonfinite == "candidate":
            return f"loss is {cand} at step {step} where the baseline's is {base:.4g}"
        if self.nonfinite == "baseline":
            return (f"the baseline's loss is {base} at step {step} where this run's is {cand:.4g}: "
                    "the two runs do not train the same")
        return (f"both losses are non-finite at step {step} ({cand} and the baseline's {base}): two diverged runs "
                "prove nothing equal, and a speedup of a diverged run does not count. "
                "Tip: find where the baseline diverges with `torchsmith debug nan`")


def compare_losses(candidate: Sequence[float], baseline: Sequence[float], *,
                   steps: int | None = None) -> LossComparison:
    """Compare ``candidate`` with ``baseline`` step by step over their first ``steps`` steps (None: all
    the steps both have), with the non-finite rule of the module docstring.

    Example::

        compare_losses([1.0, 1.01], [1.0, 1.0]).max_rel_diff   # 0.01
        compare_losses([math.nan], [math.nan]).rel_diff         # nan: not a pass
    """
    n = min(len(candidate), len(baseline), len(candidate) if steps is None else steps)
    worst, worst_step = 0.0, None
    for i in range(n):
        a, b = float(candidate[i]), float(baseline[i])
        side = _nonfinite_side(a, b)
        if side is not None:
            return LossComparison(steps=n, max_rel_diff=worst, worst_step=worst_step, nonfinite=side,
                                  nonfinite_step=i, candidate_loss=a, baseline_loss=b)
        d = rel_diff(a, b)
        if worst_step is None or d > worst:
            worst, worst_step = d, i
    return LossComparison(steps=n, max_rel_diff=worst, worst_step=worst_step)


def _nonfinite_side(candidate: float, baseline: float) -> NonfiniteSide | None:
    finite_c, finite_b = math.isfinite(candidate), math.isfinite(baseline)
    if finite_c and finite_b:
        return None
    if finite_b:
        return "candidate"
    return "baseline" if finite_c else "both"
