"""Micro-batching: split a batch, accumulate gradients, step once."""

from __future__ import annotations

from torchsmith.plan import MicroBatching
from torchsmith.transforms.base import Change, DeviceInfo, TransformInfo
from torchsmith.transforms.parts import StepParts


def apply_microbatching(parts: StepParts, cfg: MicroBatching) -> Change:
    """Make ``train_step`` run ``cfg.count`` forward/backward passes per optimizer step.

    Each micro-batch's mean loss is weighted by its share of the batch, so the
    accumulated gradient equals the full batch's (up to float summation order).
    """
    change = Change("microbatching", "one pass per batch, as written")
    if cfg.count == 1:
        return change
    before = parts.microbatches
    parts.microbatches = cfg.count
    change.targets.append("StepParts.microbatches")
    change.summary = f"{cfg.count} micro-batches per optimizer step, gradients accumulated"
    change.on_revert(lambda: setattr(parts, "microbatches", before))
    return change


def _candidates(device: DeviceInfo) -> list[MicroBatching]:
    return [MicroBatching(count=2), MicroBatching(count=4)]


INFO = TransformInfo(
    name="microbatching",
    plan_field="microbatching",
    summary="Split each batch into k micro-batches with gradient accumulation (less activation memory).",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="memory",
    rank=lambda device: 2,
)
