"""Thread pools: how many cores one op may use, and how many ops may run at once."""

from __future__ import annotations

import torch

from torchsmith.plan import Threads
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo


def apply_threads(cfg: Threads) -> Change:
    """Set ``torch.set_num_threads`` / ``set_num_interop_threads`` for this process.

    >>> change = apply_threads(Threads(intra_op=1)); torch.get_num_threads()
    1
    >>> change.revert()
    """
    change = Change("threads", "kept PyTorch's default threads")
    if cfg.intra_op is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(cfg.intra_op)
        change.on_revert(lambda: torch.set_num_threads(before))
        change.summary = f"intra-op threads {before} -> {cfg.intra_op}"
        change.targets.append("torch.set_num_threads")
    if cfg.inter_op is not None and cfg.inter_op != torch.get_num_interop_threads():
        try:
            torch.set_num_interop_threads(cfg.inter_op)
        except RuntimeError as err:
            # PyTorch allows this once per process, before any inter-op parallel work starts.
            raise TransformError(
                f"cannot set inter-op threads to {cfg.inter_op}: {err}.\n"
                "Tip: it can only be set at process start; run the plan in a fresh process "
                "(torchsmith run --plan ...) or leave threads.inter_op null."
            ) from None
        change.summary += f"; inter-op threads -> {cfg.inter_op} (cannot be reverted in-process)"
        change.targets.append("torch.set_num_interop_threads")
    return change


def _candidates(device: DeviceInfo) -> list[Threads]:
    if device.type != "cpu":
        return []
    # The count PyTorch already uses is the as-written plan: trying it again only measures noise.
    as_written = device.threads_as_written or torch.get_num_threads()
    counts = sorted({1, max(1, device.cores // 2), device.cores} - {as_written})
    return [Threads(intra_op=n) for n in counts]


INFO = TransformInfo(
    name="threads",
    plan_field="threads",
    summary="Intra-op thread count: one core per op vs all cores.",
    devices=frozenset({"cpu"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 2,
)
