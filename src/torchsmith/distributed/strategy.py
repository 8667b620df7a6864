"""Pick the distributed wrap from ``Plan.parallel``: Single, DDP, ZeRO-1 or FSDP2.

This is the last model transform of ``apply_plan``: DDP and FSDP install hooks on the final
module structure (after activation checkpointing and compile), and ZeRO-1 replaces the
optimizer that the optimizer-implementation transform configured.
"""

from __future__ import annotations

import torch.distributed as dist

from torchsmith.distributed.ddp import apply_ddp
from torchsmith.distributed.fsdp2 import apply_fsdp2
from torchsmith.distributed.zero1 import apply_zero1
from torchsmith.plan import DDP, FSDP2, Parallel, Single, Zero1
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo
from torchsmith.transforms.parts import StepParts


def apply_parallel(parts: StepParts, cfg: Parallel) -> Change:
    """Apply the distributed strategy ``cfg``; ``Single()`` changes nothing.

    >>> apply_parallel(parts, Single()).summary   # doctest: +SKIP
    'one process'
    """
    if isinstance(cfg, Single):
        return Change("parallel", "one process")
    if not (dist.is_available() and dist.is_initialized()):
        raise TransformError(
            f"parallel={cfg.kind} needs a process group, and this process is not part of one.\n"
            "Tip: start it with `torchsmith launch --nproc-per-node 2 -- run ...` (torchrun underneath)."
        )
    if isinstance(cfg, DDP):
        return apply_ddp(parts, cfg)
    if isinstance(cfg, Zero1):
        return apply_zero1(parts, cfg)
    if isinstance(cfg, FSDP2):
        return apply_fsdp2(parts, cfg)
    raise TransformError(f"unknown parallel strategy {cfg!r}")


def _candidates(device: DeviceInfo) -> list[Parallel]:
    """On several ranks: the other strategies, and DDP's communication settings one at a time (the
    as-written baseline there is ``DDP()``, PyTorch's defaults): bucket sizes, bucket views, a static
    graph, 16-bit and PowerSGD (rank 1 and 4) compression; ZeRO-1; FSDP2 with and without resharding,
    and with bf16 mixed precision where bf16 is native. One process has nothing to search."""
    if device.ranks < 2:
        return []
    hooks = ["fp16", "bf16"] if device.type == "cuda" else ["fp16"]  # bf16 compression needs NCCL
    bf16 = device.type == "cuda" or device.native_bf16  # bf16 compute only where it is native
    return [DDP(bucket_cap_mb=5), DDP(bucket_cap_mb=100), DDP(gradient_as_bucket_view=True),
            DDP(static_graph=True), *(DDP(comm_hook=h) for h in hooks),  # type: ignore[arg-type]  # Literal
            DDP(comm_hook="powersgd", powersgd_rank=1), DDP(comm_hook="powersgd", powersgd_rank=4),
            Zero1(), FSDP2(), FSDP2(reshard_after_forward=False), *([FSDP2(mixed_precision="bf16")] if bf16 else [])]


INFO = TransformInfo(
    name="parallel",
    plan_field="parallel",
    summary="Distributed data parallelism: DDP and its bucket size, bucket views, static graph and gradient "
            "compression, ZeRO-1 or FSDP2 (searched by tune --nproc-per-node).",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 0 if device.ranks > 1 else 9,  # on ranks the strategy matters most: searched first
)
