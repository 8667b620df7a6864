"""``verify_store``: the whole-store check behind ``torchsmith data verify``, every block of every file.

Reads check only the blocks they touch; this checks all of them and collects every problem
(missing, truncated, each damaged block with its byte range, unreadable headers) instead of
stopping at the first.

Example::

    report = verify_store("store/")
    report.ok, report.bytes_checked, report.problems
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchsmith.data.block_check import BlockCheck
from torchsmith.data.index_format import WHOLE_FILE_SHA256, FileRecord, StoreIndex
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.shard_files import check_sha256, check_size, load_shard
from torchsmith.data.store import StoreError, read_index
from torchsmith.text import first_line

_SHOWN_BLOCKS = 5
"""Damaged blocks named per file; the rest are counted."""


@dataclass
class VerifyReport:
    path: Path
    num_samples: int
    format_version: int
    files_checked: int = 0
    bytes_checked: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Not problems: e.g. that a format-1 store can be upgraded."""

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | Path, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Check every shard: presence, size, every block's checksum and the ``.npy`` header; collect all problems.

    >>> verify_store("store/").ok
    True
    """
    path = Path(path)
    index = read_index(path)  # an unreadable index is one problem that stops the check
    report = VerifyReport(path=path, num_samples=index.num_samples, format_version=index.format_version)
    if index.format_version == WHOLE_FILE_SHA256:
        report.notes.append(f"format 1 (one SHA-256 per shard, checked whole on first touch): "
                            f"`torchsmith data upgrade {path}` switches it to block checksums verified as read")
    start = time.perf_counter()
    records = [r for s in index.shards for r in (s.data, s.offsets) if r is not None]
    for n, record in enumerate(records):
        file = path / record.name
        try:
            check_size(file, record)
            _check_contents(file, record, index)
            load_shard(file)
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


def _check_contents(file: Path, record: FileRecord, index: StoreIndex) -> None:
    if index.block_bytes is None:
        check_sha256(file, record)
        return
    check = BlockCheck(file, record, index.block_bytes)
    bad = check.ensure_all()
    if bad:
        ranges = ", ".join(f"{b} (bytes {b * index.block_bytes}-{min((b + 1) * index.block_bytes, record.bytes) - 1})"
                           for b in bad[:_SHOWN_BLOCKS])
        more = f" and {len(bad) - _SHOWN_BLOCKS} more" if len(bad) > _SHOWN_BLOCKS else ""
        raise StoreError(f"shard {file} fails its checksum in {len(bad)} of {check.blocks} block(s): {ranges}{more}.")
