"""The packed store: fixed-size ``.npy`` shards plus an ``index.json``, written atomically.

A store is a directory::

    index.json              format version, dtype, sample shape, count, each file's block checksums
    shard_00000.npy         (n, *shape) samples, or a flat 1-D array for ragged samples
    shard_00000.offs.npy    ragged stores only: (n + 1,) int64 offsets into the flat array

Every file is written under a temporary name and renamed when complete, and ``index.json``
is written last, so an interrupted pack never leaves a directory that opens as a store.
Nothing here ever pickles: arrays are plain ``.npy`` and loaded with ``allow_pickle=False``.

Example::

    from torchsmith.data.pack import pack_arrays
    index = pack_arrays(np.zeros((1000, 3, 32, 32), np.uint8), "store/")
    index.num_samples, index.shape      # 1000, (3, 32, 32)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from torchsmith.atomic import PROCESS_START, atomic_file, atomic_write_bytes
from torchsmith.data.checksum import DEFAULT_BLOCK_BYTES, file_digests
from torchsmith.data.index_format import (
    FORMAT_VERSION,
    MIN_BLOCK_BYTES,
    FileRecord,
    ShardRecord,
    StoreError,
    StoreIndex,
    parse_index,
)
from torchsmith.text import first_line

__all__ = ["DEFAULT_SHARD_BYTES", "FORMAT_VERSION", "INDEX_NAME", "FileRecord", "ShardRecord", "StoreError",
           "StoreIndex", "StoreWriter", "file_sha256", "read_index", "remove_store", "write_index"]

INDEX_NAME = "index.json"
DEFAULT_SHARD_BYTES = 64 << 20
"""64 MiB: big enough that per-file costs vanish; reads verify per block, not per shard, so the
shard size costs nothing at the first batch."""


def read_index(path: str | os.PathLike) -> StoreIndex:
    """Parse and validate ``DEST/index.json``; raise :class:`StoreError` naming the problem."""
    path = Path(path)
    file = path / INDEX_NAME
    if not file.is_file():
        partial = sorted(p.name for p in path.glob("*.npy*")) if path.is_dir() else []
        hint = (f" It holds {len(partial)} shard file(s) but no index: an interrupted pack." if partial else "")
        raise StoreError(f"{file} does not exist, so {path} is not a complete store.{hint}\n"
                         f"Tip: (re-)create it with `torchsmith data pack SRC {path}`.")
    try:
        raw = json.loads(file.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise StoreError(f"{file} is not a valid store index ({type(err).__name__}: {first_line(err)}).\n"
                         "Tip: re-pack the source; index.json is written by `torchsmith data pack`.") from None
    index = parse_index(raw, file)
    counted = sum(s.samples for s in index.shards)
    if counted != index.num_samples:
        raise StoreError(f"{file}: num_samples is {index.num_samples} but the shards hold {counted}.")
    return index


def write_index(dest: Path, index: StoreIndex) -> None:
    """``index.json`` written atomically: a reader sees the old index or the new one, whole."""
    _atomic_write(dest / INDEX_NAME, (json.dumps(index.to_json(), indent=1) + "\n").encode())


def file_sha256(path: Path) -> str:
    """Format 1's whole-file checksum (torchsmith 0.1.0), still checked for stores packed then."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class StoreWriter:
    """Append samples; shards are flushed at ``shard_bytes`` and the index written on close.

    Example::

        with StoreWriter("store/", dtype="uint8", shape=(3, 32, 32)) as w:
            for img in images:
                w.add(img)
        w.index.num_samples
    """

    def __init__(self, dest: str | os.PathLike, *, dtype: Any, shape: tuple[int, ...] | None,
                 shard_bytes: int = DEFAULT_SHARD_BYTES, block_bytes: int = DEFAULT_BLOCK_BYTES,
                 meta: dict[str, Any] | None = None, overwrite: bool = False) -> None:
        self.dest = Path(dest)
        self.final = self.dest
        """Where the store ends up. With ``overwrite`` of an existing store, shards are written to a
        staging directory beside it, and the two are swapped when the index is written."""
        self.dtype = np.dtype(dtype).newbyteorder("=")  # native byte order: zero-copy to torch
        if self.dtype.hasobject or self.dtype.fields is not None:
            raise StoreError(f"dtype {self.dtype} is not storable: only plain numeric dtypes (no objects, "
                             "no structured records) can be read without pickling.")
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        if block_bytes < MIN_BLOCK_BYTES or block_bytes & (block_bytes - 1):
            raise StoreError(f"block_bytes is {block_bytes}; a checksummed block is a power of two >= "
                             f"{MIN_BLOCK_BYTES} bytes (whole pages).\nTip: keep the default, {DEFAULT_BLOCK_BYTES}.")
        self.block_bytes = block_bytes
        self.meta = dict(meta or {})
        if _prepare_dest(self.dest, overwrite):
            self.dest = _staging_dir(self.final)
        sample_bytes = self.dtype.itemsize * int(np.prod(self.shape or (1,)))
        self._per_shard = max(1, shard_bytes // max(1, sample_bytes))
        self._shard_bytes = shard_bytes
        self._pending: list[np.ndarray] = []
        self._pending_bytes = 0
        self._shards: list[ShardRecord] = []
        self.index: StoreIndex | None = None

    def add(self, sample: Any) -> None:
        arr = np.asarray(sample)
        if self.shape is None:
            arr = arr.reshape(-1)
        elif arr.shape != self.shape:
            raise StoreError(f"sample {self.count} has shape {arr.shape}; this store holds {self.shape}.")
        self._pending.append(arr.astype(self.dtype, copy=False))
        self._pending_bytes += arr.size * self.dtype.itemsize
        full = (len(self._pending) >= self._per_shard if self.shape is not None
                else self._pending_bytes >= self._shard_bytes)
        if full:
            self._flush()

    def add_many(self, samples: Iterable[Any]) -> None:
        for s in samples:
            self.add(s)

    @property
    def count(self) -> int:
        return sum(s.samples for s in self._shards) + len(self._pending)

    def close(self) -> StoreIndex:
        """Flush the last shard and write ``index.json`` (atomically, last of all)."""
        if self.index is not None:
            return self.index
        self._flush()
        self.index = StoreIndex(dtype=self.dtype.str, shape=self.shape, num_samples=self.count,
                                shards=tuple(self._shards), meta=self.meta, block_bytes=self.block_bytes)
        write_index(self.dest, self.index)
        if self.dest != self.final:
            swap_in(self.dest, self.final)
            self.dest = self.final
        return self.index

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()  # on an error no index is written: the directory never looks valid
        elif self.dest != self.final:
            shutil.rmtree(self.dest, ignore_errors=True)  # an interrupted re-pack: the old store stays as it was

    def _flush(self) -> None:
        if not self._pending:
            return
        name = f"shard_{len(self._shards):05d}"
        data = self.dest / f"{name}.npy"
        if self.shape is not None:
            _save(data, np.stack(self._pending))  # (n, *shape)
            record = ShardRecord(samples=len(self._pending), data=self._record(data))
        else:
            offsets = np.zeros(len(self._pending) + 1, dtype=np.int64)
            np.cumsum([a.size for a in self._pending], out=offsets[1:])
            _save(data, np.concatenate(self._pending))
            _save(self.dest / f"{name}.offs.npy", offsets)
            record = ShardRecord(samples=len(self._pending), data=self._record(data),
                                 offsets=self._record(self.dest / f"{name}.offs.npy"))
        self._shards.append(record)
        self._pending, self._pending_bytes = [], 0

    def _record(self, path: Path) -> FileRecord:
        # Hashed back from the page cache the write just filled: ~22 GB/s, a small part of the write.
        return FileRecord(name=path.name, bytes=path.stat().st_size, blocks=file_digests(path, self.block_bytes))


def _prepare_dest(dest: Path, overwrite: bool) -> bool:
    """Check ``dest``; True when it holds a store that ``overwrite`` will replace (by a swap, at the end)."""
    if dest.exists() and not dest.is_dir():
        raise StoreError(f"{dest} exists and is not a directory.")
    if dest.is_dir() and any(dest.iterdir()):
        if not overwrite:
            raise StoreError(f"{dest} is not empty ({sum(1 for _ in dest.iterdir())} entries).\n"
                             "Tip: pass --overwrite to replace it, or choose a new directory.")
        foreign = sorted(p.name for p in dest.iterdir() if not _STORE_FILE.match(p.name))
        if foreign:
            raise StoreError(f"{dest} holds files that are not part of a store ({', '.join(foreign[:3])}), so "
                             "--overwrite will not replace it.\nTip: choose a new directory, or move those files.")
        return True
    dest.mkdir(parents=True, exist_ok=True)
    return False


_STORE_FILE = re.compile(r"^(index\.json|shard_\d+(\.offs)?\.npy|\..*\.tmp)$")


def _staging_dir(final: Path) -> Path:
    """A fresh directory beside ``final`` (same file system, so the swap is a rename); stale ones
    left by a killed earlier pack are removed first."""
    for old in final.parent.glob(f".{final.name}.packing-*"):
        if old.stat().st_mtime < PROCESS_START:
            shutil.rmtree(old, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.packing-"))
    return staging


def swap_in(staging: Path, final: Path) -> None:
    """Put the complete store ``staging`` at ``final`` and delete the old one.

    On Linux one ``renameat2(RENAME_EXCHANGE)`` swaps the two directories atomically: at every
    instant ``final`` is the whole old store or the whole new one. Elsewhere two renames, with a
    window in which ``final`` is missing but the old store survives beside it.
    """
    if not _exchange(staging, final):
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(staging, final)
        staging = old
    shutil.rmtree(staging, ignore_errors=True)  # now the old store


def _exchange(a: Path, b: Path) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _save(path: Path, array: np.ndarray) -> None:
    """``np.save`` under a temp name, fsync, rename: the final name only ever holds a whole file."""
    with atomic_file(path) as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


_atomic_write = atomic_write_bytes


def remove_store(path: str | os.PathLike) -> None:
    """Delete a store directory (index first, so a crash midway leaves an invalid store)."""
    path = Path(path)
    (path / INDEX_NAME).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
