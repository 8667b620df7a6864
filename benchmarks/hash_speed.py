"""Checksum speed on this machine, in GB/s, for the block sizes a store can use.

The store verifies each block of a shard the first time it is read, so the checksum's speed
sets what a first epoch pays on top of reading. This prints, per block size, the GB/s of
SHA-256 (the old whole-shard check), BLAKE3, xxHash (XXH3-64 and XXH3-128) and CRC32C over
the same page-cache-resident bytes, next to a ``memcpy`` of the same blocks ("memory speed").
Hashes alternate round by round and the median is kept; single-threaded, as a DataLoader
worker or the main process runs it.

    PYTHONPATH=src .venv/bin/python benchmarks/hash_speed.py [--mib 256] [--rounds 5]

Needs ``pip install blake3 xxhash crc32c google-crc32c`` (xxhash is a torchsmith dependency; the others
are only for this comparison).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable

import numpy as np


def _hashers() -> dict[str, Callable[[memoryview], object]]:
    out: dict[str, Callable[[memoryview], object]] = {
        "sha256 (hashlib)": lambda b: hashlib.sha256(b).digest(),
    }
    try:
        import blake3

        out["blake3"] = lambda b: blake3.blake3(b).digest(16)
    except ImportError:
        print("blake3 not installed: skipped")
    try:
        import xxhash

        out["xxh3_64"] = lambda b: xxhash.xxh3_64_digest(b)
        out["xxh3_128"] = lambda b: xxhash.xxh3_128_digest(b)
    except ImportError:
        print("xxhash not installed: skipped")
    try:
        import crc32c

        out["crc32c (crc32c)"] = lambda b: crc32c.crc32c(b)
    except ImportError:
        print("crc32c not installed: skipped")
    try:
        import google_crc32c

        # Its C API takes only objects without a buffer-release hook (bytes), not a memoryview of a
        # mapping: the copy to bytes is part of what it would cost a store, so it is timed too.
        out["crc32c (google-crc32c + copy)"] = lambda b: google_crc32c.value(bytes(b))
    except ImportError:
        print("google-crc32c not installed: skipped")
    return out


def gbps(fn: Callable[[memoryview], object], buf: memoryview, block: int) -> float:
    start = time.perf_counter()
    for at in range(0, len(buf), block):
        fn(buf[at:at + block])
    return len(buf) / (time.perf_counter() - start) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="bytes hashed per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    data = np.random.default_rng(0).integers(0, 256, args.mib << 20, dtype=np.uint8)
    buf = memoryview(data).cast("B")
    hashers = _hashers()
    for block_mib in (1, 2, 4):
        block = block_mib << 20
        scratch = np.empty(block, np.uint8)
        variants = {"memcpy (np.copyto)": lambda b, s=scratch: np.copyto(s[:len(b)], np.frombuffer(b, np.uint8)),
                    **hashers}
        results: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                results[name].append(gbps(fn, buf, block))
        base = statistics.median(results["memcpy (np.copyto)"])
        print(f"\nblocks of {block_mib} MiB over {args.mib} MiB, median of {args.rounds} rounds")
        for name, values in results.items():
            v = statistics.median(values)
            print(f"  {name:24s} {v:7.2f} GB/s  {v / base:5.0%} of memcpy")
    print("\nOne shared machine at one moment: compare the columns, not the absolute rates.")


if __name__ == "__main__":
    main()
