"""One shard file against its index record: present, its size, format 1's SHA-256, mapped without pickle.

Example::

    check_size(Path("store/shard_00000.npy"), record)
    data = load_shard(Path("store/shard_00000.npy"))   # a copy-on-write np.memmap
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from torchsmith.data.index_format import FileRecord, StoreError
from torchsmith.data.store import file_sha256


def load_shard(path: Path) -> np.ndarray:
    """Map ``path`` copy-on-write; never unpickles (an object array is a StoreError)."""
    try:
        return np.load(path, mmap_mode="c", allow_pickle=False)
    except FileNotFoundError:
        raise StoreError(f"shard {path} is missing.\nTip: re-pack the store; "
                         f"`torchsmith data verify {path.parent}` lists every problem.") from None
    except ValueError as err:
        raise StoreError(f"shard {path} is not a readable .npy file ({err}).\nTip: re-pack the store.") from None


def check_size(path: Path, record: FileRecord) -> None:
    if not path.is_file():
        raise StoreError(f"shard {path} is missing (the index lists it).\n"
                         f"Tip: re-pack the store; `torchsmith data verify {path.parent}` lists every problem.")
    size = path.stat().st_size
    if size != record.bytes:
        what = "truncated" if size < record.bytes else "longer than written"
        raise StoreError(f"shard {path} is {what}: {size} bytes, the index says {record.bytes}.\n"
                         "Tip: re-pack the store; an interrupted copy leaves truncated files.")


def check_sha256(path: Path, record: FileRecord) -> None:
    """Format 1: the whole file against the SHA-256 that torchsmith 0.1.0 recorded."""
    assert record.sha256 is not None, "format 1 records carry a SHA-256"
    digest = file_sha256(path)
    if digest != record.sha256:
        raise StoreError(f"shard {path} fails its checksum: sha256 {digest[:16]}..., the index says "
                         f"{record.sha256[:16]}....\nTip: the file changed after packing; re-pack the store.")


_HEADER_BYTES = 64 << 10
"""Enough for any ``.npy`` header np.save writes for a store's shapes (numpy caps v1 headers at 64 KiB)."""


def prefetch_headers(paths: Iterable[Path]) -> None:
    """Ask the kernel for the start of each file now, without waiting: the shards a first batch
    touches are then opened (and their headers parsed) from the page cache, not one disk read
    after another. A no-op where ``posix_fadvise`` is missing; a missing file is left to the open."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, _HEADER_BYTES, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
