"""ZeRO stage 1: DDP for the gradients, ``ZeroRedundancyOptimizer`` to shard the optimizer state.

Each rank keeps the optimizer state (Adam's two moments) of ~1/world of the parameters,
updates only those, then broadcasts them to the other ranks. Optimizer-state memory per
rank falls by ~world; communication per step rises by one broadcast of the parameters.
"""

from __future__ import annotations

import inspect

import torch

from torchsmith.distributed.ddp import apply_ddp
from torchsmith.plan import DDP, Zero1
from torchsmith.transforms.base import Change, TransformError
from torchsmith.transforms.parts import StepParts


def apply_zero1(parts: StepParts, cfg: Zero1) -> Change:
    """Wrap the model in DDP and replace ``parts.optimizer`` by a ZeRO-1 optimizer of the same class.

    The scheduler, if any, is pointed at the new optimizer: ZeRO keeps the global param
    groups and copies their learning rates into its local optimizer at every step.

    >>> change = apply_zero1(parts, Zero1())   # doctest: +SKIP
    """
    from torch.distributed.optim import ZeroRedundancyOptimizer  # here: a one-process run never needs it

    old = parts.optimizer
    if old.state:
        raise TransformError(
            f"ZeRO-1 must replace the optimizer before its first step, but {type(old).__name__} already "
            f"holds state for {len(old.state)} parameters.\nTip: apply the plan to a fresh optimizer."
        )
    change = apply_ddp(parts, DDP())
    change.summary = change.summary.replace("DDP", "ZeRO-1 (DDP gradients, sharded optimizer state)", 1)
    # The constructor takes the first group's hyperparameters (only those it accepts: a group
    # may also hold derived keys such as AdamW's decoupled_weight_decay); later groups keep theirs.
    accepted = inspect.signature(type(old).__init__).parameters
    first, *rest = [dict(g) for g in old.param_groups]
    zero = ZeroRedundancyOptimizer(first["params"], optimizer_class=type(old),
                                   **{k: v for k, v in first.items() if k in accepted and k != "params"})
    for group in rest:
        zero.add_param_group(group)
    parts.optimizer = zero
    if parts.scheduler is not None:
        parts.scheduler.optimizer = zero

    def revert() -> None:
        parts.optimizer = old
        if parts.scheduler is not None:
            parts.scheduler.optimizer = old

    change.on_revert(revert)
    return change


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of tensors held in this rank's optimizer state (ZeRO: only the local shard's).

    >>> opt = torch.optim.Adam(torch.nn.Linear(4, 4).parameters()); optimizer_state_bytes(opt)
    0
    """
    from torch.distributed.optim import ZeroRedundancyOptimizer

    local = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    total = 0
    for state in local.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value = value.to_local() if hasattr(value, "to_local") else value  # FSDP2: the local shard
                total += value.numel() * value.element_size()
    return total
