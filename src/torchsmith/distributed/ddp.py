"""DistributedDataParallel: one full replica per rank, gradients all-reduced during backward.

DDP splits the gradients into buckets (``bucket_cap_mb``) and all-reduces each bucket as soon
as backward has filled it, overlapping communication with the rest of backward. Under
gradient accumulation the engine enters ``no_sync()`` for all but the last micro-batch, so
the all-reduce runs once per optimizer step instead of once per micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from torchsmith.plan import DDP
from torchsmith.transforms.base import Change, TransformError, mark_applied
from torchsmith.transforms.parts import StepParts

_HOOKS = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}


def comm_hook(cfg: DDP, process_group: Any) -> tuple[Any, Callable[..., Any]]:
    """The ``(state, hook)`` that ``DistributedDataParallel.register_comm_hook`` takes for ``cfg.comm_hook``
    (the state of the 16-bit hooks is the process group; PowerSGD's is its own, holding the error feedback)."""
    if cfg.comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group, matrix_approximation_rank=cfg.powersgd_rank,
                                            start_powerSGD_iter=cfg.powersgd_start_iter)
        return state, powerSGD_hook.powerSGD_hook
    if cfg.comm_hook is None:
        raise ValueError("this DDP config has no comm hook")
    return process_group, _HOOKS[cfg.comm_hook]


def comm_hook_code(cfg: DDP) -> str:
    """The lines that register ``cfg``'s hook on a DDP-wrapped ``model``, for adoption code."""
    if cfg.comm_hook == "powersgd":
        return ("from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook\n"
                f"model.register_comm_hook(powerSGD_hook.PowerSGDState(None, matrix_approximation_rank="
                f"{cfg.powersgd_rank}, start_powerSGD_iter={cfg.powersgd_start_iter}), powerSGD_hook.powerSGD_hook)")
    return ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
            f"model.register_comm_hook(None, default_hooks.{cfg.comm_hook}_compress_hook)")


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
        # The hook compresses each bucket (to 16 bits, or PowerSGD's low-rank factors), all-reduces it,
        # and decompresses into the grads.
        ddp.register_comm_hook(*comm_hook(cfg, dist.group.WORLD))
    parts.model, parts.no_sync = ddp, ddp.no_sync

    def revert() -> None:
        parts.model, parts.no_sync = model, nullcontext

    change.on_revert(revert)
    change.targets.append(type(model).__name__)
    hook = f"powersgd rank {cfg.powersgd_rank}" if cfg.comm_hook == "powersgd" else cfg.comm_hook
    extras = [f"{hook} gradient compression"] if cfg.comm_hook else []
    extras += ["gradients as bucket views"] * cfg.gradient_as_bucket_view + ["static graph"] * cfg.static_graph
    settings = ", ".join([f"{cfg.bucket_cap_mb} MiB buckets", *extras])
    change.summary = f"DDP over {dist.get_world_size()} ranks ({settings})"
    return change
