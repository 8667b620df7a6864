"""``ResumableSampler``: a seeded epoch order that can restart mid-epoch exactly, sharded by rank.

The order of epoch ``e`` is a pure function of ``(seed, e)``: a permutation drawn from its
own ``torch.Generator``, never from the global RNG. Rank ``r`` of ``w`` takes the strided
shard ``order[r::w]``, so the shards are disjoint and together cover the epoch (with
``drop_last`` the last ``N % w`` samples are dropped instead, so every rank gets as many).

Resuming is a matter of position, not of replaying: ``set_start(n)`` skips the first ``n``
samples of this rank's shard, and the rest is exactly what the uninterrupted epoch would
have yielded. The sampler cannot count what was consumed itself: DataLoader workers
prefetch indices ahead of the training loop. :class:`torchsmith.data.loader.Loader` counts
the batches the loop actually took.

Example::

    sampler = ResumableSampler(len(ds), seed=0)
    sampler.set_epoch(3)
    sampler.set_start(10 * batch_size)   # resume after 10 batches of epoch 3
    loader = DataLoader(ds, batch_size=batch_size, sampler=sampler)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

from torchsmith.seeding import derive_seed

STREAM_SAMPLER = 11
"""Random stream id for the epoch order (see ``seeding.derive_seed``)."""


class ResumableSampler(Sampler):
    """Seeded, rank-sharded, resumable sample order. Yields ints, or ``(epoch, index)`` pairs.

    ``with_epoch=True`` yields ``(epoch, index)`` so that a dataset can derive per-sample
    randomness from ``(seed, epoch, index)``: exact with any number of workers, persistent
    workers included (which never see ``set_epoch`` on the main process's copy).
    """

    def __init__(self, num_samples: int, *, shuffle: bool = True, seed: int = 0, rank: int = 0,
                 world_size: int = 1, drop_last: bool = False, with_epoch: bool = False) -> None:
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, found {num_samples}.")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size}).\n"
                             "Tip: pass rank=dist.get_rank(), world_size=dist.get_world_size().")
        self.num_samples = num_samples
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.with_epoch = with_epoch
        self.epoch = 0
        self.start = 0
        self.stop: int | None = None
        """End each pass after this many samples of the shard (None: the whole shard)."""

    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch``'s order; a pending ``set_start`` of another epoch is dropped."""
        if int(epoch) != self.epoch:
            self.start = 0
        self.epoch = int(epoch)

    def set_start(self, samples: int) -> None:
        """Skip the first ``samples`` of this rank's shard in the next pass over the current epoch."""
        if not 0 <= samples <= len(self):
            raise ValueError(f"start {samples} is outside this rank's shard of {len(self)} samples.")
        self.start = int(samples)

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The whole epoch's order, before sharding: ``(num_samples,)`` int64."""
        if not self.shuffle:
            return torch.arange(self.num_samples)
        g = torch.Generator().manual_seed(derive_seed(self.seed, STREAM_SAMPLER, epoch))
        return torch.randperm(self.num_samples, generator=g)

    def shard(self, epoch: int) -> torch.Tensor:
        """This rank's part of epoch ``epoch``'s order, ``start`` not applied."""
        order = self.epoch_order(epoch)
        if self.drop_last:
            order = order[: self.num_samples - self.num_samples % self.world_size]
        return order[self.rank :: self.world_size]

    def __len__(self) -> int:
        usable = self.num_samples - (self.num_samples % self.world_size if self.drop_last else 0)
        return len(range(self.rank, usable, self.world_size))

    def __iter__(self) -> Iterator[Any]:
        # The start applies to one pass: the next pass of this epoch starts from its beginning.
        start, self.start = self.start, 0
        shard = self.shard(self.epoch)[start:self.stop].tolist()
        if self.with_epoch:
            return iter([(self.epoch, i) for i in shard])
        return iter(shard)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "start": self.start, "seed": self.seed, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("num_samples", self.num_samples) != self.num_samples or state.get("seed", self.seed) != self.seed:
            raise ValueError(f"sampler state is for {state.get('num_samples')} samples with seed {state.get('seed')}; "
                             f"this sampler has {self.num_samples} with seed {self.seed}.\n"
                             "Tip: resume with the same dataset and seed the checkpoint was written with.")
        self.set_epoch(state["epoch"])
        self.set_start(state["start"])
