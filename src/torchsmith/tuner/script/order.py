"""Which knobs the script tuner tries first, from what the script as written measured.

A knob that acts on one part of the step can speed the whole step by at most ``1 / (1 - share)``
(Amdahl's law), where ``share`` is that part's fraction of the step. The optimizer implementation
(``foreach``, ``fused``) acts only inside ``optimizer.step``, whose time the injection measures
on CPU in the first as-written run (:attr:`ScriptRun.optimizer_share`). So:

* when even a free optimizer step could not give ``1 + NOISE_MARGIN``, the optimizer knob is not
  tried: its candidates could only read noise;
* when it could give at least :data:`OPTIMIZER_FIRST_BOUND`, the optimizer goes first. The walk
  spends its budget in knob order, and a measured large share is a better bet than knobs whose
  effect is unknown until they are measured. On ``benchmarks/true_wins.py`` (300 small tensors,
  a for-loop AdamW), with threads and precision first, 2 of 4 tunes of one ``--repeats 4`` run
  ran out of their 4-minute budget before ``fused`` was tried; with the optimizer first, a
  ``--repeats 3`` run found the win 3 of 3 times.

Example::

    dims, skipped, notes = order_by_share(dims, optimizer_share=0.4)   # optimizer first: at most 1.67x
"""

from __future__ import annotations

import math

from torchsmith.engine.space import Dimension
from torchsmith.measure.intervals import NOISE_MARGIN

OPTIMIZER_FIRST_BOUND = 1.10
"""The optimizer goes first when a free optimizer step would make the script at least this much faster:
a gain the default 8 pairs can decide on a quiet machine (the calibration of four
``benchmarks/false_wins.py`` tunes at A/A +-1-2% said a 1.10x needs 2-3 pairs), not on a noisy one."""


def order_by_share(dims: list[Dimension], optimizer_share: float | None
                   ) -> tuple[list[Dimension], list[tuple[str, str]], list[str]]:
    """``dims`` reordered or trimmed by the optimizer step's measured share; the knobs skipped, with
    why, and a note for the user. Unchanged when the share was not measured (CUDA, no optimizer)."""
    names = [d.name for d in dims]
    if optimizer_share is None or "optimizer" not in names:
        return dims, [], []
    bound = 1 / (1 - optimizer_share) if optimizer_share < 1 else math.inf
    said = f"optimizer.step takes {optimizer_share:.0%} of the step as written"
    optimizer = [d for d in dims if d.name == "optimizer"]
    rest = [d for d in dims if d.name != "optimizer"]
    if bound < 1 + NOISE_MARGIN:
        return rest, [("optimizer", f"{said}: even a free step would give at most {bound:.3f}x, below the "
                                    f"{1 + NOISE_MARGIN:.2f}x a win needs")], []
    if bound >= OPTIMIZER_FIRST_BOUND and names[0] != "optimizer":
        return optimizer + rest, [], [f"{said} (a free step: up to {bound:.2f}x): the optimizer knob is tried first"]
    return dims, [], []
