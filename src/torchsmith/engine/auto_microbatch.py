"""Automatic micro-batching (``Plan.auto_microbatch``): on an out-of-memory error, halve the
micro-batch and retry the same batch, down to one sample per micro-batch.

The step owns this policy; the explanation attached to an OOM it does not recover from comes
from :mod:`torchsmith.measure.oom`.
"""

from __future__ import annotations

import warnings

from torchsmith.measure.oom import is_oom
from torchsmith.text import first_line
from torchsmith.transforms.base import Change
from torchsmith.transforms.parts import StepParts

__all__ = ["OOMError", "apply_auto_microbatch", "is_oom", "next_microbatches"]


class OOMError(RuntimeError):
    """Out of memory even at one sample per micro-batch (``Plan.auto_microbatch``)."""


def next_microbatches(count: int, batch_len: int, err: BaseException) -> int:
    """The micro-batch count to retry with after an OOM: twice as many, so each is half as big.

    Raises :class:`OOMError` when every micro-batch is already one sample.
    """
    size = -(-batch_len // count)  # ceil
    if size <= 1:
        raise OOMError(
            f"out of memory at micro-batch size 1 ({count} micro-batches of a {batch_len}-sample batch): "
            f"halving cannot go further. The failure was: {first_line(err)[:200]}\n"
            "Tip: cut activation memory another way (activation checkpointing, bf16 autocast, saved-tensor "
            "compression), or shrink the model or sequence length; `torchsmith.explain_oom` ranks the fixes."
        ) from err
    new = min(batch_len, count * 2)
    warnings.warn(f"auto_microbatch: out of memory with {count} micro-batch(es) of {size} samples; "
                  f"retrying the same batch with {new} micro-batches.", RuntimeWarning, stacklevel=3)
    return new


def apply_auto_microbatch(parts: StepParts, enabled: bool) -> Change:
    """Install ``Plan.auto_microbatch`` on the step parts."""
    change = Change("auto_microbatch", "out-of-memory errors pass through, as written")
    if not enabled:
        return change
    parts.auto_microbatch = True
    change.summary = "on out-of-memory, halve the micro-batch and retry the batch"
    change.on_revert(lambda: setattr(parts, "auto_microbatch", False))
    return change
