"""``MmapDataset``: zero-copy reads from a packed store, shared across DataLoader workers.

Shards are opened with ``np.load(mmap_mode="c")``: the file is mapped copy-on-write
(MAP_PRIVATE), so every process, DataLoader workers included, reads the same page-cache
pages and no worker holds a private copy of the data. ``"c"`` rather than ``"r"`` because a
read-only array makes ``torch.from_numpy`` warn, and a write through such a tensor would
crash; with ``"c"`` a stray write only copies the one page it touches. A sample is then
``torch.from_numpy(shard[j])``: a view, no copy, for every dtype torch shares with numpy.

Checks: at open, the index, its format version and every shard file's presence and size;
on a shard's first touch (per process, unless already done before the workers forked), its
SHA-256 against the index. ``verify_store`` checks everything up front.

Example::

    ds = MmapDataset("store/")
    x = ds[0]                      # a view into the mapped shard
    batch = ds[[3, 1, 4, 1, 5]]    # one gather: (5, *shape)
    loader = DataLoader(ds, batch_size=64, num_workers=2)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from torchsmith.data.store import FileRecord, StoreError, StoreIndex, file_sha256, read_index
from torchsmith.text import first_line

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

    ``check="lazy"`` verifies each shard's checksum on first touch; ``"none"`` skips it
    (sizes are still checked at open).
    """

    def __init__(self, path: str | Path, *, check: Literal["lazy", "none"] = "lazy") -> None:
        self.path = Path(path)
        self.index: StoreIndex = read_index(self.path)
        self.check = check
        for shard in self.index.shards:
            for record in (shard.data, shard.offsets):
                if record is not None:
                    _check_size(self.path / record.name, record)
        self._starts = np.cumsum([0] + [s.samples for s in self.index.shards])  # (shards + 1,)
        self._open: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._verified: set[int] = set()

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
            return as_tensor(data[j])  # a view into the mapping: no copy
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
            if local[-1] - local[0] == idx.size - 1 and (np.diff(local) == 1).all():
                np.copyto(out, data[local[0]:local[-1] + 1])  # a contiguous run: a plain memcpy
            else:
                # Bounds are checked above; mode="clip" lets numpy write straight into `out`
                # (mode="raise" would gather into a temporary buffer and copy it again).
                np.take(data, local, axis=0, out=out, mode="clip")
            return as_tensor(out)
        for k in np.unique(shards):
            mask = shards == k
            out[mask] = self._shard(int(k))[0][local[mask]]
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
        local = (idx - self._starts[shards]).tolist()
        mapped = {int(k): torch.from_numpy(self._shard(int(k))[0]) for k in np.unique(shards)}  # no copy
        return [mapped[k][j] for k, j in zip(shards.tolist(), local, strict=True)]

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

    def _shard(self, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        if k in self._open:
            return self._open[k]
        record = self.index.shards[k]
        files = [r for r in (record.data, record.offsets) if r is not None]
        if self.check == "lazy" and k not in self._verified:
            for r in files:
                _check_checksum(self.path / r.name, r)
            self._verified.add(k)
        data = _load(self.path / record.data.name)
        offsets = _load(self.path / record.offsets.name) if record.offsets else None
        expected = (record.samples, *self.index.shape) if self.index.shape is not None else None
        if data.dtype != np.dtype(self.index.dtype) or (expected is not None and data.shape != expected):
            raise StoreError(f"{self.path / record.data.name} holds {data.dtype}{list(data.shape)}; the index "
                             f"says {self.index.dtype}{list(expected or ['?'])}.\nTip: re-pack the store.")
        if offsets is not None and record.offsets is not None and (
                offsets.shape != (record.samples + 1,) or offsets[-1] != data.shape[0]):
            raise StoreError(f"{self.path / record.offsets.name} does not match its data shard "
                             f"({offsets.shape[0]} offsets for {record.samples} samples).\nTip: re-pack the store.")
        self._open[k] = (data, offsets)
        return data, offsets

    def __getstate__(self) -> dict[str, Any]:
        # Workers re-map the files themselves: pickling an open memmap would copy its data.
        # Checksums already verified here need not be recomputed in every worker.
        state = dict(self.__dict__)
        state["_open"] = {}
        return state


def _empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if get_worker_info() is not None and dtype in _TORCH_DTYPES:
        return torch.from_numpy(np.empty(0, dtype)).new_empty(shape).share_memory_().numpy()
    return np.empty(shape, dtype)


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="c", allow_pickle=False)
    except FileNotFoundError:
        raise StoreError(f"shard {path} is missing.\nTip: re-pack the store; "
                         f"`torchsmith data verify {path.parent}` lists every problem.") from None
    except ValueError as err:
        raise StoreError(f"shard {path} is not a readable .npy file ({err}).\nTip: re-pack the store.") from None


def _check_size(path: Path, record: FileRecord) -> None:
    if not path.is_file():
        raise StoreError(f"shard {path} is missing (the index lists it).\n"
                         f"Tip: re-pack the store; `torchsmith data verify {path.parent}` lists every problem.")
    size = path.stat().st_size
    if size != record.bytes:
        what = "truncated" if size < record.bytes else "longer than written"
        raise StoreError(f"shard {path} is {what}: {size} bytes, the index says {record.bytes}.\n"
                         "Tip: re-pack the store; an interrupted copy leaves truncated files.")


def _check_checksum(path: Path, record: FileRecord) -> None:
    digest = file_sha256(path)
    if digest != record.sha256:
        raise StoreError(f"shard {path} fails its checksum: sha256 {digest[:16]}..., the index says "
                         f"{record.sha256[:16]}....\nTip: the file changed after packing; re-pack the store.")


@dataclass
class VerifyReport:
    path: Path
    num_samples: int
    files_checked: int = 0
    bytes_checked: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | Path, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check every shard: presence, size, SHA-256 and ``.npy`` header; collect all problems.

    >>> verify_store("store/").ok
    True
    """
    path = Path(path)
    index = read_index(path)  # an unreadable index is one problem that stops the check
    report = VerifyReport(path=path, num_samples=index.num_samples)
    start = time.perf_counter()
    records = [r for s in index.shards for r in (s.data, s.offsets) if r is not None]
    for n, record in enumerate(records):
        file = path / record.name
        try:
            _check_size(file, record)
            _check_checksum(file, record)
            _load(file)
            report.files_checked += 1
            report.bytes_checked += record.bytes
        except StoreError as err:
            report.problems.append(first_line(err))
        if progress:
            progress(n + 1, len(records))
    if report.ok:
        try:  # headers agree with the index (dtype, shape, offsets)
            ds = MmapDataset(path, check="none")
            for k in range(len(index.shards)):
                ds._shard(k)
        except StoreError as err:
            report.problems.append(first_line(err))
    report.seconds = time.perf_counter() - start
    return report
