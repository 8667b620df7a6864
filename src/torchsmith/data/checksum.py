"""Block checksums: the XXH3-128 of each fixed-size block of a shard file.

Why XXH3-128 (measured by ``benchmarks/hash_speed.py`` on the 2-core development VM, 1 MiB
blocks): about 22 GB/s, faster than a ``memcpy`` of the same bytes (about 14 GB/s), against
4.2 GB/s for BLAKE3, 12 GB/s for CRC32C and 1.8 GB/s for SHA-256 (which torchsmith 0.1.0 used
per shard). A store's checksums sit in the index beside the shards, so whoever can change a
shard can change the index too: a cryptographic hash would buy no protection against tampering
here, only against the faults a non-cryptographic one catches as well (bit rot, a truncated or
half-copied file, a stray write). XXH3-128 catches those at memory speed; its 128 bits make an
accidental match of a damaged block negligible (2^-128).

Example::

    digests = file_digests(Path("store/shard_00000.npy"), 1 << 20)   # 32 hex digits per MiB
"""

from __future__ import annotations

import mmap
from pathlib import Path

import xxhash

BLOCK_HASH = "xxh3-128"
"""The one block hash this torchsmith writes and reads (recorded in the index as ``block_hash``)."""
DIGEST_HEX = 32
"""Hex digits of one block's digest (128 bits)."""
DEFAULT_BLOCK_BYTES = 1 << 20
"""1 MiB. Every block size from 1 to 4 MiB hashes at the same speed (``benchmarks/hash_speed.py``),
so the size trades what a random read verifies beyond the bytes it needs (up to one block per
sample: the first batch of 64 samples from a 2 GB store verifies at most 64 MiB) against the size
of the index (32 hex digits per block: 64 KiB for 2 GB, 32 MiB for 1 TB). Measured by
``benchmarks/data_store.py`` section 5, a 2 GB store's first batch from a cold page cache with
1 / 2 / 4 MiB blocks: 207 / 346 / 592 ms (and 645 / 820 / 917 ms in a busier moment). Stores of
many TB can pack with larger blocks to keep the index small."""


def block_count(nbytes: int, block_bytes: int) -> int:
    """Blocks of a file of ``nbytes``: the last one may be short."""
    return -(-nbytes // block_bytes)


def digest(buffer: memoryview | bytes) -> str:
    """One block's XXH3-128, as hex. Reads the buffer in place (a memoryview of a mapping: no copy)."""
    return xxhash.xxh3_128_hexdigest(buffer)


def map_file(path: Path) -> mmap.mmap | None:
    """A read-only mapping of the whole file (the page cache's own pages, no private copy); None if empty."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None


def buffer_digests(buffer: memoryview, block_bytes: int) -> str:
    """The digests of every block of ``buffer``, concatenated."""
    return "".join(digest(buffer[at:at + block_bytes]) for at in range(0, len(buffer), block_bytes))


def file_digests(path: Path, block_bytes: int) -> str:
    """The digests of every block of the file at ``path``, concatenated (what the index records)."""
    mapping = map_file(path)
    return "" if mapping is None else buffer_digests(memoryview(mapping), block_bytes)
