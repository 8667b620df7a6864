"""Build a DataLoader from a plan's ``LoaderConfig``, resumable by batch position.

A workload that wants ``plan.loader`` to take effect gives a factory,
``Workload.loader(cfg: LoaderConfig) -> Loader``, usually one line over :func:`make_loader`.
The engine builds the loader once per run (so persistent workers persist across epochs),
calls ``set_epoch`` before each epoch and ``set_start`` on resume.

Example::

    def loader(cfg: LoaderConfig) -> Loader:
        return make_loader(dataset, cfg, batch_size=64, seed=0, written=LoaderArgs(num_workers=0))

    Workload(..., batches=loader(LoaderConfig()), loader=loader)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, default_collate

from torchsmith.data.sampler import ResumableSampler
from torchsmith.plan import LoaderConfig
from torchsmith.seeding import derive_seed

STREAM_LOADER = 12


@dataclass(frozen=True)
class LoaderArgs:
    """Concrete DataLoader arguments: a ``LoaderConfig`` resolved against the as-written ones."""

    num_workers: int = 0
    prefetch_factor: int = 2
    pin_memory: bool = False
    persistent_workers: bool = False
    batch_fetch: bool = False
    worker_threads: int = 1
    """``torch.set_num_threads`` inside each worker: 1 keeps workers from oversubscribing the
    cores the trainer's intra-op threads use."""

    def resolve(self, cfg: LoaderConfig | None) -> LoaderArgs:
        """These arguments with every non-None field of ``cfg`` applied."""
        if cfg is None:
            return self
        changes = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if getattr(cfg, f.name) is not None}
        return dataclasses.replace(self, **changes)

    def effective(self) -> LoaderArgs:
        """What actually applies here: worker-only options drop with 0 workers, pinning without CUDA."""
        workers = self.num_workers > 0
        return dataclasses.replace(
            self, prefetch_factor=self.prefetch_factor if workers else 2,
            persistent_workers=self.persistent_workers and workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
        )

    def as_config(self) -> LoaderConfig:
        return LoaderConfig(num_workers=self.num_workers, prefetch_factor=self.prefetch_factor,
                            pin_memory=self.pin_memory, persistent_workers=self.persistent_workers,
                            batch_fetch=self.batch_fetch)

    def describe(self) -> str:
        e = self.effective()
        parts = [f"num_workers={e.num_workers}"]
        if e.num_workers:
            parts += [f"prefetch_factor={e.prefetch_factor}", f"persistent_workers={e.persistent_workers}"]
        parts += [f"pin_memory={e.pin_memory}", "batch sampler" if e.batch_fetch else "per-sample fetch"]
        return ", ".join(parts)


def worker_init(threads: int, worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: cap the worker's intra-op threads (top level: picklable)."""
    torch.set_num_threads(threads)


class BatchFetch(Dataset):
    """``ds[list_of_indices]`` -> batch: the dataset's own ``get_batch`` or per-sample + collate."""

    def __init__(self, dataset: Any, collate_fn: Callable[[list], Any] | None) -> None:
        self.dataset = dataset
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, indices: list[Any]) -> Any:
        if self.collate_fn is None and hasattr(self.dataset, "get_batch"):
            return self.dataset.get_batch(indices)
        return (self.collate_fn or default_collate)([self.dataset[i] for i in indices])


def _identity(batch: Any) -> Any:
    return batch


class Loader:
    """A DataLoader over a :class:`ResumableSampler` that counts the batches the loop took.

    ``state_dict()`` is ``{"epoch", "batches"}``: batches handed out this epoch, not batches
    the workers prefetched, so restoring it resumes exactly where the training loop stopped.
    """

    def __init__(self, dataset: Any, sampler: ResumableSampler, args: LoaderArgs, *, batch_size: int,
                 collate_fn: Callable[[list], Any] | None = None, drop_last: bool = True, seed: int = 0) -> None:
        self.dataset, self.sampler, self.batch_size, self.drop_last = dataset, sampler, batch_size, drop_last
        self.args = args.effective()
        a = self.args
        common: dict[str, Any] = dict(
            num_workers=a.num_workers, pin_memory=a.pin_memory,
            # Its own generator: iterating never draws from (or shifts) the global torch RNG.
            generator=torch.Generator().manual_seed(derive_seed(seed, STREAM_LOADER)),
        )
        if a.num_workers:
            common.update(prefetch_factor=a.prefetch_factor, persistent_workers=a.persistent_workers,
                          worker_init_fn=functools.partial(worker_init, a.worker_threads))
        if a.batch_fetch:
            self.dataloader = DataLoader(BatchFetch(dataset, collate_fn), batch_size=None, collate_fn=_identity,
                                         sampler=BatchSampler(sampler, batch_size, drop_last), **common)
        else:
            self.dataloader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                                         collate_fn=collate_fn, **common)
        self.epoch = 0
        self.taken = 0

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        self.epoch, self.taken = int(epoch), 0

    def set_start(self, batches: int) -> None:
        """Start the next pass after ``batches`` batches of the current epoch (resume)."""
        self.sampler.set_start(batches * self.batch_size)
        self.taken = int(batches)

    def set_limit(self, batches: int | None) -> None:
        """End every pass after ``batches`` batches, as a complete short epoch (for measuring:
        an abandoned pass would leave prefetched batches that the next pass waits for)."""
        self.sampler.stop = None if batches is None else batches * self.batch_size

    def __len__(self) -> int:
        """Batches in a whole epoch of this rank."""
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.dataloader:
            self.taken += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches": self.taken}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.set_epoch(state["epoch"])
        self.set_start(state["batches"])

    def close(self) -> None:
        """Stop persistent workers now rather than at garbage collection."""
        it = getattr(self.dataloader, "_iterator", None)  # DataLoader keeps persistent workers here
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.dataloader._iterator = None

    def __repr__(self) -> str:
        return f"Loader({type(self.dataset).__name__}, batch_size={self.batch_size}, {self.args.describe()})"


def make_loader(dataset: Any, cfg: LoaderConfig | None = None, *, batch_size: int, seed: int = 0,
                written: LoaderArgs = LoaderArgs(), shuffle: bool = True, drop_last: bool = True,
                collate_fn: Callable[[list], Any] | None = None, rank: int | None = None,
                world_size: int | None = None, with_epoch: bool = False) -> Loader:
    """A resumable :class:`Loader` over ``dataset`` with ``cfg`` applied on top of ``written``.

    ``rank``/``world_size`` default to the initialised process group's (each rank then reads a
    disjoint shard of every epoch), else 0 and 1.

    >>> loader = make_loader(MmapDataset("store/"), LoaderConfig(num_workers=2), batch_size=64)
    """
    if rank is None or world_size is None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank = torch.distributed.get_rank() if distributed else 0
        world_size = torch.distributed.get_world_size() if distributed else 1
    sampler = ResumableSampler(len(dataset), shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                               with_epoch=with_epoch)
    return Loader(dataset, sampler, written.resolve(cfg), batch_size=batch_size, collate_fn=collate_fn,
                  drop_last=drop_last, seed=seed)
