"""The process group under torchrun: init from the environment, batch sharding, agreed flags.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous store for every
worker; :func:`init_from_env` turns that into a process group (gloo on CPU, NCCL on CUDA).
Outside torchrun nothing here starts a group, and the engine runs single-process.

Example::

    ctx = init_from_env(torch.device("cpu"))      # None when not under torchrun
    if ctx is not None:
        local = shard_batch(batch, ctx.rank, ctx.world_size)
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from torchsmith.batch import batch_len, split_batch


@dataclass(frozen=True)
class DistContext:
    """Who this worker is in the group, and the device it trains on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    restart: int
    """torchrun's restart count (``TORCHELASTIC_RESTART_COUNT``): 0 on the first attempt."""


def under_torchrun() -> bool:
    """True in a worker started by torchrun (or anything that sets RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_from_env(device: torch.device) -> DistContext | None:
    """Join the group torchrun set up; None outside torchrun.

    CUDA workers each take ``cuda:LOCAL_RANK`` and use NCCL; CPU workers use gloo.
    """
    if not under_torchrun():
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    if not dist.is_initialized():
        # torchrun shares the rendezvous TCPStore across restarts, and the keys where gloo
        # publishes each rank's address are not per attempt: a restarted rank could read a
        # dead worker's address and fail with "Connection refused". Prefix them per attempt.
        store, rank, world_size = next(dist.rendezvous("env://"))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world_size,
                                store=dist.PrefixStore(f"torchsmith/attempt_{restart}/", store))
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                       device=device, restart=restart)


_host: tuple[Any, Any] | None = None
"""(the default group, its gloo twin): one twin per default group, however many runs ask."""


def host_group() -> dist.ProcessGroup | None:
    """A gloo group over every rank, for agreements about host-side state (a stop signal received):
    ``None``, the default group, when that is gloo already; else a gloo group made on the first
    call for this default group (every rank must make that call at the same point, as with any
    ``new_group``) and reused after it.

    An all-reduce of a CPU tensor over it waits for no GPU stream. Over NCCL the same flag would
    go to the GPU and come back with ``.item()``, a CPU-GPU sync that ends the CPU's run-ahead
    every step.
    """
    global _host
    if dist.get_backend() == "gloo":
        return None
    world = dist.group.WORLD
    if _host is None or _host[0] is not world:  # a new default group (a restart in-process) gets its own
        _host = (world, dist.new_group(backend="gloo"))
    return _host[1]


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_batch(batch: Any, rank: int, world_size: int) -> Any:
    """This rank's contiguous slice of a global batch (dim 0 split in ``world_size`` parts).

    Every rank iterates the same global batches, so the data position is the same on
    every rank and a checkpoint needs one position, not one per rank.

    >>> shard_batch(torch.arange(8), 1, 2)
    tensor([4, 5, 6, 7])
    """
    if world_size == 1:
        return batch
    n = batch_len(batch)
    if n % world_size:
        raise ValueError(
            f"a global batch of {n} samples does not split evenly over {world_size} ranks; uneven shards "
            "would weight the ranks' gradients unequally.\n"
            f"Tip: use a batch size that is a multiple of {world_size}."
        )
    return split_batch(batch, world_size)[rank]


def any_rank(flag: bool | torch.Tensor, device: torch.device | None = None) -> bool:
    """True on every rank if ``flag`` is true on any rank (all-reduce MAX of one element).

    Used for decisions every rank must take together, e.g. skipping a step whose loss
    is non-finite on one rank only: a rank that skipped alone would desynchronise the
    replicas. Reading the result is a sync point (``.item()``).
    """
    t = torch.as_tensor(flag, dtype=torch.float32, device=device).detach().reshape(1).clone()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def mean_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of ``t`` over ranks (a copy; ``t`` itself is unchanged)."""
    t = t.detach().clone()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= dist.get_world_size()
    return t


def shutdown(code: int = 0) -> NoReturn:
    """End a torchrun worker whose work is done, with exit status ``code``: a barrier (no rank leaves
    while another still communicates), then the process's exit handlers, and ``os._exit``.

    The process group is not torn down, on purpose. Gloo's destructor can deadlock: it joins its
    work thread while holding the GIL, and that thread may at that moment be releasing the last
    finished work, whose tensors are Python objects and need the GIL to be freed (seen here once
    in about 50 two-rank jobs on a loaded machine, in ``~Reducer`` -> ``~ProcessGroupGloo``, the
    thread in ``~AsyncBarrierWork``; ``destroy_process_group`` can meet the same, pytorch#75097).
    Left to the interpreter's own exit instead, gloo's threads can abort the process ("terminate
    called without an active exception"), which torchrun counts as a failed worker. After the
    barrier nothing is left to send, so the worker runs its ``atexit`` handlers (logging, compile
    workers), flushes its output and leaves; the kernel closes the sockets.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
