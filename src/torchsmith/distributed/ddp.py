"""DistributedDataParallel: one full replica per rank, gradients all-reduced during backward.

DDP splits the gradients into buckets (``bucket_cap_mb``) and all-reduces each bucket as soon
as backward has filled it, overlapping communication with the rest of backward. Under
gradient accumulation the engine enters ``no_sync()`` for all but the last micro-batch, so
the all-reduce runs once per optimizer step instead of once per micro-batch.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from torchsmith.plan import DDP
from torchsmith.transforms.base import Change, TransformError, mark_applied
from torchsmith.transforms.parts import StepParts

_HOOKS = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}


def apply_ddp(parts: StepParts, cfg: DDP) -> Change:
    """Wrap ``parts.model`` in DDP (a sync point: rank 0's parameters are broadcast to all).

    >>> change = apply_ddp(parts, DDP(comm_hook="fp16"))   # doctest: +SKIP
    >>> type(parts.model).__name__
    'DistributedDataParallel'
    """
    if cfg.comm_hook == "bf16" and dist.get_backend() != "nccl":
        raise TransformError(
            f"DDP comm_hook='bf16' needs NCCL (CUDA); this process group uses {dist.get_backend()}.\n"
            "Tip: use DDP(comm_hook='fp16'), which gloo supports, or comm_hook=None."
        )
    model = parts.model
    change = Change("parallel", "ddp")
    mark_applied(model, "parallel", change)
    device_ids = [parts.device.index] if parts.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=cfg.bucket_cap_mb,
                                  gradient_as_bucket_view=cfg.gradient_as_bucket_view, static_graph=cfg.static_graph)
    if cfg.comm_hook is not None:
        # The hook compresses each bucket to 16 bits, all-reduces it, and decompresses into the grads.
        ddp.register_comm_hook(dist.group.WORLD, _HOOKS[cfg.comm_hook])
    parts.model, parts.no_sync = ddp, ddp.no_sync

    def revert() -> None:
        parts.model, parts.no_sync = model, nullcontext

    change.on_revert(revert)
    change.targets.append(type(model).__name__)
    extras = [f"{cfg.comm_hook} gradient compression"] if cfg.comm_hook else []
    extras += ["gradients as bucket views"] * cfg.gradient_as_bucket_view + ["static graph"] * cfg.static_graph
    settings = ", ".join([f"{cfg.bucket_cap_mb} MiB buckets", *extras])
    change.summary = f"DDP over {dist.get_world_size()} ranks ({settings})"
    return change
