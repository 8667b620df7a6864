"""Whether a finished run is a success: a run that ends non-finite is a failure, not a result.

A loss of ``nan`` at the last step, or a ``nonfinite=skip_step`` run that skipped every one of
its steps, trained nothing usable; ``run`` raises :class:`RunFailedError` (the CLI exits 1)
unless the caller asked to carry on (``allow_nonfinite``, ``--allow-nonfinite``).

Example::

    try:
        result = run(workload, steps=100)
    except RunFailedError as err:
        err.result.losses      # what was trained, for the report
"""

from __future__ import annotations

import math
from typing import Any


class RunFailedError(ValueError):
    """The run finished, but its outcome is unusable; ``.result`` holds the :class:`RunResult`."""

    def __init__(self, message: str, result: Any):
        super().__init__(message)
        self.result = result


def check_outcome(result: Any, step_fn: Any, allow_nonfinite: bool) -> None:
    """Raise :class:`RunFailedError` for a non-finite final loss or a run whose every step was skipped."""
    if allow_nonfinite or not result.losses:
        return
    ran = len(result.losses)
    guard = step_fn.parts.nonfinite
    skipped = getattr(guard, "skipped", 0) if guard is not None and getattr(guard, "mode", None) == "skip_step" else 0
    if skipped >= ran:
        raise RunFailedError(
            f"every one of the {ran} steps run was skipped as non-finite (nonfinite=skip_step): the model "
            "did not train.\nTip: fix the cause the warnings name (lower the learning rate, a stable loss "
            "formula), or pass --allow-nonfinite to exit 0 anyway.", result)
    final = result.losses[-1]
    if not math.isfinite(final):
        first = next(i for i, v in enumerate(result.losses) if not math.isfinite(v))
        raise RunFailedError(
            f"the final train loss is {final} at step {result.end_step} (non-finite since step "
            f"{result.start_step + first + 1} of {result.end_step}).\nTip: set the plan's nonfinite to \"raise\" to "
            "name the op that produced it, or pass --allow-nonfinite to exit 0 anyway.", result)
