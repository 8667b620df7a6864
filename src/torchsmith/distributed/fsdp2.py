"""FSDP2: ``fully_shard`` each block, then the root. Parameters, gradients and optimizer state
are sharded over the ranks; each block's parameters are all-gathered just before its forward
(and again before its backward when resharded) and its gradients reduce-scattered after.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch.distributed as dist
from torch import nn

from torchsmith.plan import FSDP2
from torchsmith.structure import discover
from torchsmith.transforms.base import Change, TransformError, mark_applied
from torchsmith.transforms.parts import StepParts


def apply_fsdp2(parts: StepParts, cfg: FSDP2) -> Change:
    """Shard ``parts.model`` in place: one FSDP unit per repeated block
    (:func:`torchsmith.structure.discover`), plus the root.

    ``fully_shard`` replaces every parameter by a sharded DTensor parameter, so the
    optimizer's param groups are pointed at the new parameters (its state is still empty).
    Reverting restores the step's hooks but not the parameter layout: build a fresh model.

    >>> change = apply_fsdp2(parts, FSDP2())   # doctest: +SKIP
    """
    # Imported here: torch.distributed.fsdp pulls in DTensor (most of a second), which a
    # one-process run never needs.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, optimizer = parts.model, parts.optimizer
    if optimizer.state:
        raise TransformError(
            f"FSDP2 must shard the parameters before the optimizer's first step, but it already holds "
            f"state for {len(optimizer.state)} parameters.\nTip: apply the plan to a fresh optimizer."
        )
    change = Change("parallel", "fsdp2")
    mark_applied(model, "parallel", change)
    mesh = init_device_mesh(parts.device.type, (dist.get_world_size(),))
    before = dict(model.named_parameters())
    found = discover(model)
    # Without a unique block list (none, or ambiguous) the root is the only unit: correct, less overlap.
    units = found.block_items("FSDP2") if found.blocks is not None else []
    policy = _mixed_precision(cfg)
    for _, block in units:
        fully_shard(block, mesh=mesh, reshard_after_forward=cfg.reshard_after_forward, mp_policy=policy)
    # The root unit holds what is left (embeddings, head); it is gathered for the whole step anyway.
    fully_shard(model, mesh=mesh, reshard_after_forward=cfg.reshard_after_forward, mp_policy=policy)
    after = dict(model.named_parameters())
    new_for_old = {id(before[name]): after[name] for name in before}
    for group in optimizer.param_groups:
        group["params"] = [new_for_old[id(p)] for p in group["params"]]
    parts.no_sync = _no_gradient_sync(model)
    change.on_revert(lambda: setattr(parts, "no_sync", nullcontext))
    change.targets += [path for path, _ in units] + [type(model).__name__]
    change.summary = (f"FSDP2 over {dist.get_world_size()} ranks: {len(units)} blocks + root"
                      f"{', resharded after forward' if cfg.reshard_after_forward else ''}"
                      f"{', bf16 compute with fp32 gradient reduction' if cfg.mixed_precision else ''}")
    return change


def _mixed_precision(cfg: FSDP2):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if cfg.mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()  # fully_shard's own default: the parameters' dtype throughout


def _no_gradient_sync(model: nn.Module):
    @contextmanager
    def no_sync():
        # Gradients accumulate unsharded on each rank; the last micro-batch reduce-scatters them.
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    return no_sync
