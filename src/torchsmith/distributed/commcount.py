"""Count the collectives a training step issues, and their bytes.

:func:`count_collectives` patches torch.distributed's Python collectives for the duration of
a ``with`` block; ZeroRedundancyOptimizer and FSDP2 call those. DDP's reducer calls the
process group from C++, so :func:`observe_ddp` registers PyTorch's default Python all-reduce
hook (the same maths as the built-in one) to route its bucket all-reduces through them.

Bytes are the size of the full collective buffer: the tensor for all-reduce and broadcast,
the gathered output for all-gather, the unreduced input for reduce-scatter.

Example::

    stats = CommStats()
    with count_collectives(stats):
        step(batch)
    stats.calls["all_reduce"], stats.bytes["all_reduce"]
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

# name in torch.distributed -> (counted as, position and keyword of the tensor that sizes the buffer)
_PATCHED = {
    "all_reduce": ("all_reduce", 0, "tensor"),
    "broadcast": ("broadcast", 0, "tensor"),
    "all_gather_into_tensor": ("all_gather", 0, "output_tensor"),
    "all_gather_single": ("all_gather", 0, "output_tensor"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "reduce_scatter_single": ("reduce_scatter", 1, "input"),
}


@dataclass
class CommStats:
    calls: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)

    def add(self, op: str, tensor: torch.Tensor) -> None:
        self.calls[op] += 1
        self.bytes[op] += tensor.numel() * tensor.element_size()

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


@contextlib.contextmanager
def count_collectives(stats: CommStats):
    """Record every collective issued through torch.distributed's Python API into ``stats``."""
    originals = {name: getattr(dist, name) for name in _PATCHED if hasattr(dist, name)}

    def counted(name, fn):
        op, index, keyword = _PATCHED[name]

        def wrapper(*args, **kwargs):
            stats.add(op, args[index] if len(args) > index else kwargs[keyword])
            return fn(*args, **kwargs)

        return wrapper

    for name, fn in originals.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield stats
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def observe_ddp(ddp: torch.nn.parallel.DistributedDataParallel) -> None:
    """Route DDP's bucket all-reduces through ``dist.all_reduce`` so they can be counted.

    Must be called before the first forward. ``allreduce_hook`` divides each bucket by the
    world size and all-reduces it: what DDP's built-in C++ hook does.
    """
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
