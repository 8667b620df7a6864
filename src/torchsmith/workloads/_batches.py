"""Deterministic, re-iterable batch sources shared by the built-in workloads.

Every random draw here uses its own ``torch.Generator`` seeded from
``(seed, stream, epoch)``, never the global RNG, so that a run, a tuning
candidate and a resumed run all see exactly the same batches, whatever else
touched ``torch.manual_seed`` in between.

Example::

    src = ShuffledBatches((xs, ys), batch_size=64, seed=0)
    src.set_epoch(3)          # a different, reproducible order for epoch 3
    for x, y in src: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from torchsmith.seeding import derive_seed

# Independent random streams per workload, so that e.g. changing the number of
# training batches does not change the generated data or the validation set.
STREAM_DATA = 1
STREAM_TRAIN_ORDER = 2
STREAM_VAL = 3


def generator(*parts: int) -> torch.Generator:
    """A CPU generator seeded from ``derive_seed(*parts)``."""
    return torch.Generator().manual_seed(derive_seed(*parts))


class ShuffledBatches:
    """Mini-batches over in-memory tensors; one pass is one epoch.

    ``tensors`` share their first (sample) dimension. With ``shuffle`` the order
    of each epoch is a permutation seeded from ``(seed, epoch)``; call
    :meth:`set_epoch` before each epoch, as with ``DistributedSampler``.
    ``collate`` turns the indexed tensors into the batch (e.g. uint8 -> float);
    it should be a picklable top-level callable so the source can cross into
    DataLoader worker processes.
    """

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        *,
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        drop_last: bool = True,
        collate: Callable[[tuple[torch.Tensor, ...]], tuple[torch.Tensor, ...]] | None = None,
    ) -> None:
        n = {int(t.shape[0]) for t in tensors}
        if len(n) != 1:
            raise ValueError(f"tensors must share their first dimension; found sizes {sorted(n)}.")
        self.tensors = tuple(tensors)
        self.num_samples = n.pop()
        if batch_size < 1 or (drop_last and batch_size > self.num_samples):
            raise ValueError(
                f"batch_size={batch_size} does not fit {self.num_samples} samples with drop_last={drop_last}.\n"
                f"Tip: use a batch_size between 1 and {self.num_samples}."
            )
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        # drop_last keeps every batch the same shape, which torch.compile and
        # CUDA graphs need to avoid recompiling on the final short batch.
        self.drop_last = drop_last
        self.collate = collate
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        if self.shuffle:
            order = torch.randperm(
                self.num_samples, generator=generator(self.seed, STREAM_TRAIN_ORDER, self.epoch)
            )
        else:
            order = torch.arange(self.num_samples)
        bs = self.batch_size
        for i in range(len(self)):
            idx = order[i * bs : (i + 1) * bs]
            batch = tuple(t[idx] for t in self.tensors)  # fancy indexing copies: contiguous, owned
            yield self.collate(batch) if self.collate is not None else batch

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(samples={self.num_samples}, batch_size={self.batch_size}, "
            f"batches={len(self)}, shuffle={self.shuffle}, epoch={self.epoch})"
        )
