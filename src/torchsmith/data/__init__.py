"""Data: packed memory-mapped stores, a resumable sampler and loader, and measured loader tuning.

Example::

    from torchsmith.data import MmapDataset, make_loader, pack_source
    pack_source("images/", "store/")                  # or `torchsmith data pack images/ store/`
    loader = make_loader(MmapDataset("store/"), plan.loader, batch_size=64, seed=0)
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
