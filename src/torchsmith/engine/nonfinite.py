"""``Plan.nonfinite``: what a training step with a non-finite loss or gradient does.

One finiteness check of the loss and the gradient norm per step (one host-device sync). On a
bad step the step is replayed op by op to name the culprit (``measure.locate_nonfinite``), then
it raises, skips the optimizer step, or warns, as configured.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchsmith.distributed.runtime import any_rank
from torchsmith.measure.locate_nonfinite import OUTSIDE, NonfiniteOrigin, replay, step_finite
from torchsmith.seeding import rng_state
from torchsmith.transforms.base import Change
from torchsmith.transforms.parts import StepParts


class NonFiniteError(FloatingPointError):
    """A training step produced NaN or Inf (``Plan.nonfinite = "raise"``)."""


class NonFiniteGuard:
    """``Plan.nonfinite``: one finiteness check of loss and gradient norm per step (one sync).

    On a bad step it replays the step op by op to name the culprit, then raises, skips the
    optimizer step, or warns, as configured. ``findings`` keeps what was found.
    """

    def __init__(self, mode: str):
        self.mode = mode
        self.step = 0
        self.skipped = 0
        self.findings: list[NonfiniteOrigin] = []
        self._rng: dict[str, Any] | None = None

    def start(self) -> None:
        """Snapshot the RNG before the step, so a bad step replays with the same dropout masks."""
        self.step += 1
        self._rng = rng_state()

    def step_ok(self, model: nn.Module, loss: torch.Tensor, replay_step: Callable[[], Any],
                check_grads: bool = True, params: list[torch.Tensor] | None = None) -> bool:
        """True: take the optimizer step. The ``bool()`` is this step's one host-device sync.

        ``params``: the tensors whose gradients the optimizer will apply (default: the model's).
        They differ when a transform keeps fp32 master copies (bf16 parameters)."""
        params = (list(model.parameters()) if params is None else params) if check_grads else []
        # Under torchrun every rank must act alike at the same step: any_rank all-reduces the
        # flag (MAX), so a NaN on one rank makes all ranks replay and skip or raise together.
        if not any_rank(~step_finite(loss, params)):
            return True
        try:
            found = replay(model, replay_step, self._rng) if self._rng is not None else None
        except Exception as err:  # e.g. a compiled region that refuses the checking mode: keep the verdict
            warnings.warn(f"nonfinite: the op-level re-run failed ({err!r}); no culprit named", RuntimeWarning,
                          stacklevel=1)
            found = None
        found = NonfiniteOrigin(**{**found.__dict__, "step": self.step}) if found else NonfiniteOrigin(
            module=OUTSIDE, op=None, pass_="forward", kind="nan/inf", inputs_finite=None, step=self.step)
        self.findings.append(found)
        if self.mode == "raise":
            raise NonFiniteError(
                f"{found.describe()}.\nTip: look at that op's inputs; for an overflow lower the learning "
                "rate or clip gradients; set Plan.nonfinite='skip_step' to skip such steps instead.")
        warnings.warn(f"non-finite step: {found.describe()}"
                      + ("; optimizer step skipped" if self.mode == "skip_step" else ""), RuntimeWarning, stacklevel=3)
        if self.mode == "skip_step":
            self.skipped += 1
            return False
        return True


def apply_nonfinite(parts: StepParts, mode: str | None) -> Change:
    """Install ``Plan.nonfinite`` on the step parts (None: no check, the as-written step)."""
    change = Change("nonfinite", "no finiteness check, as written")
    if mode is None:
        return change
    before = parts.nonfinite
    parts.nonfinite = NonFiniteGuard(mode)
    change.summary = f"loss and gradient norm checked each step (one sync); non-finite -> {mode}"
    change.on_revert(lambda: setattr(parts, "nonfinite", before))
    return change
