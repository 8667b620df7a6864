"""``MmapDataset``: zero-copy reads from a packed store, shared across DataLoader workers.

Shards are opened with ``np.load(mmap_mode="c")``: the file is mapped copy-on-write
(MAP_PRIVATE), so every process, DataLoader workers included, reads the same page-cache
pages and no worker holds a private copy of the data. ``"c"`` rather than ``"r"`` because a
read-only array makes ``torch.from_numpy`` warn, and a write through such a tensor would
crash; with ``"c"`` a stray write only copies the one page it touches. A sample is then
``torch.from_numpy(shard[j])``: a view, no copy, for every dtype torch shares with numpy.

Checks: at open, the index, its format version and every shard file's presence and size.
Then each block of a shard file (1 MiB by default) is verified against its XXH3-128 in the
index the first time a read touches it (per process, unless already done before the workers
forked), so a run pays for the bytes it reads, once, at memory speed. Stores packed by
torchsmith 0.1.0 (format 1, one SHA-256 per shard) still load: each shard's SHA-256 is checked
on its first touch, as before, and ``torchsmith data upgrade`` converts them in place.
``torchsmith.data.verify.verify_store`` checks everything up front.

Example::

    ds = MmapDataset("store/")
    x = ds[0]                      # a view into the mapped shard
    batch = ds[[3, 1, 4, 1, 5]]    # one gather: (5, *shape)
    loader = DataLoader(ds, batch_size=64, num_workers=2)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from torchsmith.data.block_check import BlockCheck, ensure_many
from torchsmith.data.index_format import WHOLE_FILE_SHA256
from torchsmith.data.shard_files import check_sha256, check_size, load_shard, prefetch_headers
from torchsmith.data.store import StoreError, StoreIndex, read_index

logger = logging.getLogger(__name__)

_TORCH_DTYPES = {np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
                                        np.float16, np.float32, np.float64, np.complex64, np.complex128)}


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` (no copy) where torch has the dtype; otherwise one widening copy."""
    if array.dtype in _TORCH_DTYPES:
        return torch.from_numpy(array)
    wider = np.int64 if array.dtype.kind in "ui" else np.float64
    return torch.from_numpy(array.astype(wider))


class MmapDataset(Dataset):
    """Map-style dataset over a packed store. ``ds[i]`` is one sample; ``ds[list]`` a batch.

    ``check="lazy"`` verifies each block of a shard the first time a read touches it (a format-1
    store: each shard's SHA-256 on its first touch); ``"none"`` skips it (sizes are still checked
    at open).
    """

    def __init__(self, path: str | Path, *, check: Literal["lazy", "none"] = "lazy") -> None:
        self.path = Path(path)
        self.index: StoreIndex = read_index(self.path)
        self.check = check
        for shard in self.index.shards:
            for record in (shard.data, shard.offsets):
                if record is not None:
                    check_size(self.path / record.name, record)
        self._starts = np.cumsum([0] + [s.samples for s in self.index.shards])  # (shards + 1,)
        self._open: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._heads: dict[int, tuple[int, int]] = {}
        """Per open shard: where the array starts in its data file and in its offsets file (the .npy header)."""
        self._verified: set[int] = set()
        """Format 1: the shards whose SHA-256 was checked."""
        self._blocks: dict[int, tuple[BlockCheck, BlockCheck | None]] = {}
        """Format 2: per shard touched, the verified blocks of its data file and its offsets file."""
        self._lock = threading.Lock()
        """Threads reading one shard for the first time must share one BlockCheck, not make two."""
        self._sample_bytes = np.dtype(self.index.dtype).itemsize * int(np.prod(self.index.shape or (1,)))
        if self.index.format_version == WHOLE_FILE_SHA256 and check == "lazy":
            _note_old_format(self.path)

    def __len__(self) -> int:
        return self.index.num_samples

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self.index.shape

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, (list, tuple, np.ndarray, torch.Tensor)):
            return self.get_batch(i)
        i = self._bound(int(i))
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        data, offsets = self._shard(k)
        j = i - int(self._starts[k])
        if offsets is None:
            self._verify_rows(k, np.array([j]))
            return as_tensor(data[j])  # a view into the mapping: no copy
        self._verify_ragged(k, j, offsets)
        return as_tensor(data[offsets[j]:offsets[j + 1]])

    def get_batch(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> Any:
        """Gather samples in one copy into a ``(len(indices), *shape)`` tensor (a list if ragged).

        Inside a DataLoader worker the batch is allocated in shared memory, so sending it to
        the main process costs no second copy (as ``default_collate`` does).
        """
        idx = self._checked(indices)
        if self.index.ragged:
            return [self[int(i)] for i in idx]
        shards = np.searchsorted(self._starts, idx, side="right") - 1
        dtype = np.dtype(self.index.dtype)
        assert self.index.shape is not None  # not ragged (returned above): samples share one shape
        out = _empty((idx.size, *self.index.shape), dtype)
        local = idx - self._starts[shards]
        if idx.size and (shards == shards[0]).all():  # the common case: one gather, one copy
            data = self._shard(int(shards[0]))[0]
            self._verify_rows(int(shards[0]), local)
            if local[-1] - local[0] == idx.size - 1 and (np.diff(local) == 1).all():
                np.copyto(out, data[local[0]:local[-1] + 1])  # a contiguous run: a plain memcpy
            else:
                # Bounds are checked above; mode="clip" lets numpy write straight into `out`
                # (mode="raise" would gather into a temporary buffer and copy it again).
                np.take(data, local, axis=0, out=out, mode="clip")
            return as_tensor(out)
        touched = np.unique(shards)
        self._prefetch_unopened(touched)
        mapped = {k: self._shard(k)[0] for k in touched.tolist()}
        ensure_many([self._rows_missing(k, local[shards == k]) for k in mapped])
        for k, data in mapped.items():
            mask = shards == k
            out[mask] = data[local[mask]]
        return as_tensor(out)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """The DataLoader's batched fetch: a plain ``DataLoader(ds, batch_size=64, shuffle=True)``
        calls this once per batch instead of ``__getitem__`` once per sample.

        The DataLoader's contract is a list of samples that its ``collate_fn`` stacks, so the
        samples are views into the mapped shards (bounds checked once, shards found in one
        vectorised search) and ``default_collate``'s stack is the batch's only copy. A gather
        here would copy the batch twice.
        """
        idx = self._checked(indices)
        if self.index.ragged or np.dtype(self.index.dtype) not in _TORCH_DTYPES:
            return [self[int(i)] for i in idx]
        shards = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shards]
        touched = np.unique(shards)
        self._prefetch_unopened(touched)
        mapped = {k: torch.from_numpy(self._shard(k)[0]) for k in touched.tolist()}  # no copy
        ensure_many([self._rows_missing(k, local if touched.size == 1 else local[shards == k]) for k in mapped])
        return [mapped[k][j] for k, j in zip(shards.tolist(), local.tolist(), strict=True)]

    def _checked(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> np.ndarray:
        """Indices as int64, negatives wrapped; IndexError naming the first out of range."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            bad = idx[(idx < -len(self)) | (idx >= len(self))][0]
            raise IndexError(f"index {bad} is out of range for a store of {len(self)} samples ({self.path}).")
        return np.where(idx < 0, idx + len(self), idx)

    def _bound(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of range for a store of {n} samples ({self.path}).")
        return i + n if i < 0 else i

    def _verify_rows(self, k: int, local: np.ndarray) -> None:
        """Fixed-shape samples ``local`` of shard ``k``: their blocks verified before they are read."""
        ensure_many([self._rows_missing(k, local)])

    def _rows_missing(self, k: int, local: np.ndarray) -> tuple[BlockCheck | None, np.ndarray]:
        """The unverified blocks that samples ``local`` of open shard ``k`` lie in (and the header's)."""
        checks = self._blocks.get(k)
        if checks is None or checks[0].done:  # format 1, check="none", or every block verified already
            return _NOTHING
        head = self._heads[k][0]
        start = head + local * self._sample_bytes  # each sample's first byte in the file
        stop = start + self._sample_bytes
        if not checks[0].verified[0]:  # the header, which np.load parsed: verified with the first read
            start, stop = np.append(start, 0), np.append(stop, head)
        return checks[0], checks[0].missing(start, stop)

    def _verify_ragged(self, k: int, j: int, offsets: np.ndarray) -> None:
        """Ragged sample ``j``: the blocks of its two offsets first, then those of its bytes."""
        checks = self._blocks.get(k)
        if checks is None or checks[1] is None:
            return
        head, offs_head = self._heads[k]
        at = offs_head + j * offsets.itemsize
        checks[1].ensure(np.array([0, at]), np.array([offs_head, at + 2 * offsets.itemsize]))  # header, 2 offsets
        itemsize = np.dtype(self.index.dtype).itemsize
        lo, hi = head + int(offsets[j]) * itemsize, head + int(offsets[j + 1]) * itemsize
        checks[0].ensure(np.array([0, lo]), np.array([head, hi]))

    def _prefetch_unopened(self, shards: np.ndarray) -> None:
        """Before a batch opens several shards: their headers requested from the disk at once."""
        unopened = [k for k in shards.tolist() if k not in self._open]
        if len(unopened) > 1:
            prefetch_headers(self.path / r.name for k in unopened
                             for r in (self.index.shards[k].data, self.index.shards[k].offsets) if r is not None)

    def _open_checks(self, k: int) -> tuple[BlockCheck, BlockCheck | None]:
        with self._lock:
            if k not in self._blocks:
                record, block_bytes = self.index.shards[k], self.index.block_bytes
                assert block_bytes is not None  # format 2
                self._blocks[k] = (BlockCheck(self.path / record.data.name, record.data, block_bytes),
                                   BlockCheck(self.path / record.offsets.name, record.offsets, block_bytes)
                                   if record.offsets else None)
            return self._blocks[k]

    def _shard(self, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        if k in self._open:
            return self._open[k]
        record = self.index.shards[k]
        files = [r for r in (record.data, record.offsets) if r is not None]
        checks: tuple[BlockCheck, ...] = ()
        if self.check == "lazy" and self.index.format_version == WHOLE_FILE_SHA256 and k not in self._verified:
            for r in files:
                check_sha256(self.path / r.name, r)
            self._verified.add(k)
        elif self.check == "lazy" and self.index.format_version != WHOLE_FILE_SHA256:
            checks = tuple(c for c in self._open_checks(k) if c is not None)
        # The headers are verified with the first read's blocks (so that, from a cold disk, they are
        # fetched together), but np.load parses them now: if they do not parse or do not match the
        # index, a damaged block says more than the parse error, so it is looked for first.
        try:
            opened = self._open_files(k)
        except StoreError:
            for c in checks:
                bad = c.ensure_all()
                c.verify(np.array(bad[:1], np.int64))  # raises naming the first damaged block, if any
            raise
        self._open[k] = opened[0]
        self._heads[k] = opened[1]
        return opened[0]

    def _open_files(self, k: int) -> tuple[tuple[np.ndarray, np.ndarray | None], tuple[int, int]]:
        """Shard ``k`` mapped, its headers matching the index; and where its arrays start in the files."""
        record = self.index.shards[k]
        data = load_shard(self.path / record.data.name)
        offsets = load_shard(self.path / record.offsets.name) if record.offsets else None
        heads = (_array_start(data), _array_start(offsets) if offsets is not None else 0)
        expected = (record.samples, *self.index.shape) if self.index.shape is not None else None
        if data.dtype != np.dtype(self.index.dtype) or (expected is not None and data.shape != expected):
            raise StoreError(f"{self.path / record.data.name} holds {data.dtype}{list(data.shape)}; the index "
                             f"says {self.index.dtype}{list(expected or ['?'])}.\nTip: re-pack the store.")
        if offsets is not None and record.offsets is not None and (
                offsets.shape != (record.samples + 1,) or offsets[-1] != data.shape[0]):
            raise StoreError(f"{self.path / record.offsets.name} does not match its data shard "
                             f"({offsets.shape[0]} offsets for {record.samples} samples).\nTip: re-pack the store.")
        return (data, offsets), heads

    def __getstate__(self) -> dict[str, Any]:
        # Workers re-map the files themselves: pickling an open memmap would copy its data.
        # Checksums already verified here need not be recomputed in every worker.
        state = dict(self.__dict__)
        state["_open"], state["_heads"], state["_lock"] = {}, {}, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


_NOTHING: tuple[BlockCheck | None, np.ndarray] = (None, np.empty(0, np.int64))
"""A read with nothing to verify (see ``ensure_many``, which skips pairs without blocks)."""
_NOTED: set[Path] = set()


def _note_old_format(path: Path) -> None:
    """One line per store and process: format 1 still loads, and how to upgrade it."""
    if path.resolve() not in _NOTED:
        _NOTED.add(path.resolve())
        logger.warning("%s is a format-1 store (torchsmith 0.1.0): each shard's SHA-256 is checked on its first "
                       "touch, which reads the whole shard. `torchsmith data upgrade %s` switches it in place to "
                       "block checksums verified as they are read.", path, path)


def _array_start(array: np.ndarray) -> int:
    """Where a mapped ``.npy`` array's data starts in its file: the header's length."""
    return int(getattr(array, "offset", 0))


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if get_worker_info() is not None and dtype in _TORCH_DTYPES:
        return torch.from_numpy(np.empty(0, dtype)).new_empty(shape).share_memory_().numpy()
    return np.empty(shape, dtype)
