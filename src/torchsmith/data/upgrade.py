"""``upgrade_store``: a format-1 store (one SHA-256 per shard) re-indexed in place with block checksums.

The shards stay as they are; only ``index.json`` changes. Each file is read once: its SHA-256 is
checked against the old index while its blocks are hashed, so a damaged shard is refused rather
than blessed with fresh checksums. The new index replaces the old one in one atomic rename: a
reader, or an upgrade killed midway, sees the old store or the new one, whole.

Example::

    result = upgrade_store("store/")
    result.upgraded, result.index.format_version     # True, 2
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from torchsmith.data.checksum import DEFAULT_BLOCK_BYTES, buffer_digests, map_file
from torchsmith.data.index_format import FORMAT_VERSION, MIN_BLOCK_BYTES, FileRecord, StoreIndex
from torchsmith.data.shard_files import check_size
from torchsmith.data.store import StoreError, read_index, write_index


@dataclass(frozen=True)
class UpgradeResult:
    path: Path
    index: StoreIndex
    """The store's index after the call (the old one if there was nothing to do)."""
    upgraded: bool
    """False when the store already had block checksums."""
    bytes_hashed: int = 0
    seconds: float = 0.0


def upgrade_store(path: str | os.PathLike, *, block_bytes: int = DEFAULT_BLOCK_BYTES,
                  progress: Callable[[int, int], None] | None = None) -> UpgradeResult:
    """Re-index a format-1 store with per-block checksums; a store already in format 2 is left alone."""
    path = Path(path)
    index = read_index(path)
    if index.block_bytes is not None:
        return UpgradeResult(path=path, index=index, upgraded=False)
    if block_bytes < MIN_BLOCK_BYTES or block_bytes & (block_bytes - 1):
        raise StoreError(f"block_bytes is {block_bytes}; a checksummed block is a power of two >= {MIN_BLOCK_BYTES} "
                         f"bytes.\nTip: keep the default, {DEFAULT_BLOCK_BYTES}.")
    start = time.perf_counter()
    total = sum(1 + (s.offsets is not None) for s in index.shards)
    done = 0

    def rehash(record: FileRecord) -> FileRecord:
        nonlocal done
        new = _rehash(path / record.name, record, block_bytes)
        done += 1
        if progress:
            progress(done, total)
        return new

    shards = tuple(replace(s, data=rehash(s.data), offsets=rehash(s.offsets) if s.offsets else None)
                   for s in index.shards)
    new = replace(index, shards=shards, block_bytes=block_bytes, format_version=FORMAT_VERSION)
    write_index(path, new)  # temp file, fsync, rename: the old index until this instant
    return UpgradeResult(path=path, index=new, upgraded=True, bytes_hashed=index.total_bytes,
                         seconds=time.perf_counter() - start)


def _rehash(file: Path, record: FileRecord, block_bytes: int) -> FileRecord:
    """The record with block digests, after the file passed its old SHA-256 (both from one read)."""
    check_size(file, record)
    mapping = map_file(file)
    view = memoryview(mapping) if mapping is not None else memoryview(b"")
    sha = hashlib.sha256(view).hexdigest()
    if sha != record.sha256:
        raise StoreError(f"shard {file} fails its checksum: sha256 {sha[:16]}..., the index says "
                         f"{str(record.sha256)[:16]}...; the store was not upgraded (its index is unchanged).\n"
                         "Tip: the file changed after packing; re-pack the store from its source.")
    return FileRecord(name=record.name, bytes=record.bytes, blocks=buffer_digests(view, block_bytes))
