"""Microbenchmark real collectives inside the live process group, for :func:`alpha_beta.fit_link`.

Every rank of the group calls :func:`bench_collectives` together (gloo on CPU, NCCL on
CUDA). For each collective and buffer size it runs a few warm-up calls, then times each
repeat between a barrier (so all ranks start together) and the call's return
(``torch.cuda.synchronize`` first on CUDA, where collectives are asynchronous). The
per-rank median is then all-reduced with MAX: a collective is as slow as its slowest
rank, and every rank gets the same samples, so every rank fits the same link.

Signatures used (torch 2.13): ``all_reduce(tensor, op, group, async_op)``,
``all_gather_into_tensor(output_tensor, input_tensor, group, async_op)`` (output is
``world`` times the input) and ``reduce_scatter_tensor(output, input, op, group,
async_op)`` (input is ``world`` times the output).

Example::

    samples = bench_collectives(BenchConfig(sizes_bytes=sizes_up_to(2 * bucket_bytes)), device)
    fit = fit_link(samples)          # same on every rank
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchsmith.distributed.alpha_beta import Collective, CollectiveSample

BENCHED: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """What to time: which collectives, at which sizes, how many times."""

    sizes_bytes: tuple[int, ...]
    """Full-buffer sizes in bytes (rounded down to whole elements divisible by the world size)."""
    collectives: tuple[Collective, ...] = BENCHED
    """Collectives to time; broadcast is costed as all_gather and not timed by default."""
    warmup: int = 2
    """Untimed calls per (collective, size) first: connection set-up and allocator warm-up."""
    repeats: int = 5
    """Timed calls per (collective, size); the median is kept. More: steadier, slower."""
    dtype: torch.dtype = torch.float32
    """Element type of the buffers (gradients and parameters of fp32 training)."""

    def __post_init__(self) -> None:
        if not self.sizes_bytes or min(self.sizes_bytes) <= 0:
            raise ValueError(f"BenchConfig.sizes_bytes must be non-empty and positive; found {self.sizes_bytes}.\n"
                             "Tip: use sizes_up_to(2 * largest_bucket_bytes).")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"BenchConfig needs repeats >= 1 and warmup >= 0; found {self.repeats}, {self.warmup}.")


def sizes_up_to(largest_bytes: int, *, smallest_bytes: int = 4096, factor: int = 4) -> tuple[int, ...]:
    """Geometric sizes from ``smallest_bytes`` up to and including ``largest_bytes``.

    >>> sizes_up_to(100_000)
    (4096, 16384, 65536, 100000)
    """
    if largest_bytes < smallest_bytes:
        return (smallest_bytes,)
    sizes = []
    size = smallest_bytes
    while size < largest_bytes:
        sizes.append(size)
        size *= factor
    sizes.append(largest_bytes)
    return tuple(sizes)


def bench_collectives(cfg: BenchConfig, device: torch.device, group: dist.ProcessGroup | None = None,
                      ) -> list[CollectiveSample]:
    """Time ``cfg``'s collectives on every rank of ``group`` (default: the world); call on all ranks.

    Returns one :class:`CollectiveSample` per (collective, size), the same list on every rank.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("bench_collectives runs inside a process group, and none is initialised.\n"
                           "Tip: start the ranks with torchrun and call init_from_env(device) first.")
    world = dist.get_world_size(group)
    element = torch.empty((), dtype=cfg.dtype).element_size()
    measured: list[tuple[Collective, int, float]] = []
    for collective in cfg.collectives:
        for size in cfg.sizes_bytes:
            numel = max(world, size // element // world * world)  # divisible by the world for gather/scatter
            call = _call(collective, numel, world, cfg.dtype, device, group)
            for _ in range(cfg.warmup):
                call()
            times = [_timed(call, device, group) for _ in range(cfg.repeats)]
            measured.append((collective, numel * element, statistics.median(times)))
    slowest = torch.tensor([t for _, _, t in measured], dtype=torch.float64,
                           device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return [CollectiveSample(ranks=world, collective=c, nbytes=n, seconds=float(t))
            for (c, n, _), t in zip(measured, slowest.tolist(), strict=True)]


def _call(collective: Collective, numel: int, world: int, dtype: torch.dtype, device: torch.device,
          group: dist.ProcessGroup | None):
    """A closure that runs one ``collective`` over a full buffer of ``numel`` elements."""
    # Zeros: repeated all-reduce sums stay 0, never overflowing to inf or anything slower to add.
    full = torch.zeros(numel, dtype=dtype, device=device)
    shard = torch.zeros(numel // world, dtype=dtype, device=device)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if collective == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard, group=group)
    if collective == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full, group=group)
    if collective == "broadcast":
        return lambda: dist.broadcast(full, src=dist.get_global_rank(group, 0) if group else 0, group=group)
    raise ValueError(f"bench_collectives cannot time {collective!r}.\nTip: use one of {', '.join(BENCHED)}.")


def _timed(call, device: torch.device, group: dist.ProcessGroup | None) -> float:
    """Seconds of one call, started together on every rank."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: earlier work must not land in the timing
    dist.barrier(group=group)
    start = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # sync point: NCCL collectives return before they finish
    return time.perf_counter() - start
