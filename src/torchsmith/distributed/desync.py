"""Find replicas that drifted apart: all-gather parameter checksums and name what differs.

Data-parallel replicas must hold bit-identical parameters after every step. They drift when
one rank skipped a step, applied a different learning rate, or ran non-deterministic code
outside DDP. The check costs one all-gather of two int64 per parameter.

The checksum is exact: each parameter's bits are read as integers and summed twice, once
plainly and once weighted by position, so a single flipped bit or two swapped elements
change it. Float sums would forgive a difference below their rounding.

Example::

    report = check_desync(model)          # every rank calls it
    for m in report.mismatches:
        m.name, m.ranks            # e.g. "blocks.1.linear.bias", [1]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Mismatch:
    name: str
    """Parameter (or buffer) name, as in the unwrapped model's state_dict."""
    ranks: list[int]
    """Ranks whose checksum differs from the majority's."""
    checksums: list[int]
    """One checksum per rank, rank 0 first."""


@dataclass(frozen=True)
class DesyncReport:
    world_size: int
    checked: int
    """Tensors compared (parameters and floating buffers)."""
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        return not self.mismatches


def checksum(t: torch.Tensor) -> torch.Tensor:
    """Two exact int64 checksums of ``t``'s bits: (sum, position-weighted sum). Shape (2,)."""
    t = t.detach()
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()  # FSDP2 DTensor: compare what the model computes with (an all-gather)
    flat = t.contiguous().reshape(-1)
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    ints = flat.view(bits).to(torch.int64)  # (N,) the raw bits, exactly
    weights = torch.arange(flat.numel(), device=flat.device, dtype=torch.int64) % 251 + 1
    return torch.stack([ints.sum(), (ints * weights).sum()])  # int64 wraps on overflow: still exact


def named_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    tensors = list(inner.named_parameters())
    tensors += [(n, b) for n, b in inner.named_buffers() if b.is_floating_point()]
    return tensors


def check_desync(model: nn.Module) -> DesyncReport:
    """Compare every parameter and floating buffer across ranks (a collective: all ranks call it).

    >>> check_desync(model).in_sync   # doctest: +SKIP
    True
    """
    tensors = named_tensors(model)
    local = torch.stack([checksum(t) for _, t in tensors]) if tensors else torch.zeros(0, 2, dtype=torch.int64)
    if not (dist.is_available() and dist.is_initialized()):
        return DesyncReport(world_size=1, checked=len(tensors))
    world = dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([len(tensors)], device=device))
    if len({int(c) for c in counts}) > 1:
        raise RuntimeError(
            f"ranks hold different numbers of parameters: {[int(c) for c in counts]} (rank order).\n"
            "Tip: every rank must build the same model; check rank-dependent code in the model factory."
        )
    gathered = [torch.empty_like(local, device=device) for _ in range(world)]
    dist.all_gather(gathered, local.to(device))
    per_rank = torch.stack(gathered).cpu()  # (world, P, 2)
    mismatches = []
    for i, (name, _) in enumerate(tensors):
        sums = [tuple(per_rank[r, i].tolist()) for r in range(world)]
        # The most common checksum is the reference; on a tie (2 ranks), rank 0's.
        majority = max(sums, key=lambda s: (sums.count(s), s == sums[0]))
        odd = [r for r, s in enumerate(sums) if s != majority]
        if odd:
            mismatches.append(Mismatch(name=name, ranks=odd, checksums=[s[0] for s in sums]))
    return DesyncReport(world_size=world, checked=len(tensors), mismatches=mismatches)
