"""Data: packed memory-mapped stores, a resumable sampler and loader, and measured loader tuning.

Example::

    from torchsmith.data import MmapDataset, make_loader, pack_source
    pack_source("images/", "store/")                  # or `torchsmith data pack images/ store/`
    loader = make_loader(MmapDataset("store/"), plan.loader, batch_size=64, seed=0)

Modules:
    block_check   BlockCheck: first-read verification of one shard, block by block, safe under threads
    checksum      block checksums: the XXH3-128 of each fixed-size block of a shard file
    index_format  what index.json holds, and its table-driven parser (one validator per field)
    loader        make_loader: a DataLoader from a plan's LoaderConfig, resumable by batch position
    loader_tune   tune_loader: DataLoader throughput across loader arguments, the fastest recommended
    mmap_dataset  MmapDataset: zero-copy reads from a packed store; verify_store
    pack          pack_source / pack_arrays / pack_bytes: sources into a store
    sampler       ResumableSampler: a seeded epoch order that restarts mid-epoch exactly, sharded by rank
    shard_files   one shard file against its index record: present, its size, mapped without pickle
    store         the packed store: fixed-size .npy shards and an index.json, written atomically
    upgrade       upgrade_store: a format-1 store (one SHA-256 per shard) re-indexed with block checksums
    verify        verify_store: the whole-store check behind `torchsmith data verify`, every block
"""

from torchsmith.data.loader import Loader, LoaderArgs, make_loader
from torchsmith.data.loader_tune import LoaderTuneResult, tune_loader
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays, pack_bytes, pack_source
from torchsmith.data.sampler import ResumableSampler
from torchsmith.data.store import StoreError, StoreWriter, read_index
from torchsmith.data.upgrade import upgrade_store
from torchsmith.data.verify import verify_store

__all__ = [
    "Loader", "LoaderArgs", "LoaderTuneResult", "MmapDataset", "ResumableSampler", "StoreError", "StoreWriter",
    "make_loader", "pack_arrays", "pack_bytes", "pack_source", "read_index", "tune_loader", "upgrade_store",
    "verify_store",
]
