"""Stores under faults: an interrupted re-pack keeps the old store; the plain DataLoader path is batched."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from torchsmith.data import store as store_mod
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays
from torchsmith.data.store import StoreError, read_index


def test_overwrite_killed_midway_leaves_the_old_store_whole(tmp_path, monkeypatch):
    dest = tmp_path / "store"
    pack_arrays(np.zeros((50, 4), np.float32), dest)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    real_save = store_mod._save
    calls = [0]

    def dies_on_second_shard(path, array):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt  # as good as a kill for the old store: nothing after this runs
        return real_save(path, array)

    monkeypatch.setattr(store_mod, "_save", dies_on_second_shard)
    with pytest.raises(KeyboardInterrupt):
        pack_arrays(np.ones((100, 4), np.float32), dest, shard_bytes=400, overwrite=True)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert MmapDataset(dest)[0].sum() == 0


def test_overwrite_swaps_the_new_store_in_and_leaves_nothing_beside_it(tmp_path):
    dest = tmp_path / "store"
    pack_arrays(np.zeros((50, 4), np.float32), dest, shard_bytes=400)
    pack_arrays(np.ones((10, 4), np.float32), dest, overwrite=True)
    assert read_index(dest).num_samples == 10 and len(list(dest.glob("shard_*.npy"))) == 1
    assert MmapDataset(dest)[9].sum() == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_overwrite_refuses_a_directory_that_is_not_a_store(tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "thesis.tex").write_text("precious")
    with pytest.raises(StoreError, match=r"holds files that are not part of a store \(thesis\.tex\)"):
        pack_arrays(np.zeros((5, 2), np.float32), dest, overwrite=True)
    assert (dest / "thesis.tex").read_text() == "precious"


def test_plain_dataloader_uses_one_batched_read_per_batch(tmp_path, monkeypatch):
    data = np.random.default_rng(0).standard_normal((300, 3, 8, 8)).astype(np.float32)
    pack_arrays(data, tmp_path / "s", shard_bytes=40_000)  # several shards: batches straddle them
    ds = MmapDataset(tmp_path / "s")
    per_sample = [0]
    real = MmapDataset.__getitem__

    def counting(self, i):
        per_sample[0] += 1
        return real(self, i)

    monkeypatch.setattr(MmapDataset, "__getitem__", counting)
    batches = list(DataLoader(ds, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0)))
    assert per_sample[0] == 0  # no per-sample fetch: __getitems__ served every batch
    reference = list(DataLoader([torch.from_numpy(x) for x in data], batch_size=64, shuffle=True,
                                generator=torch.Generator().manual_seed(0)))
    assert [b.shape for b in batches] == [b.shape for b in reference]
    assert all(torch.equal(a, b) for a, b in zip(batches, reference, strict=True))
    with pytest.raises(IndexError, match="index 300 is out of range"):
        ds.__getitems__([0, 300])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_damaged_block_read_in_a_dataloader_worker_names_the_block_in_the_trainer(tmp_path):
    # Real worker processes: each verifies its own reads, and the error crosses back whole.
    data = np.arange(4000 * 256, dtype=np.float32).reshape(4000, 256)  # 1 KiB a sample, 1000 blocks of 4 KiB
    pack_arrays(data, tmp_path / "s", block_bytes=4096)
    shard = tmp_path / "s" / "shard_00000.npy"
    raw = bytearray(shard.read_bytes())
    raw[500 * 4096 + 9] ^= 0x04
    shard.write_bytes(bytes(raw))
    ds = MmapDataset(tmp_path / "s")
    head = int(np.load(shard, mmap_mode="r").offset)
    clean = [i for i in range(4000) if (head + (i + 1) * 1024 - 1) // 4096 != 500 and (head + i * 1024) // 4096 != 500]
    loader = DataLoader(torch.utils.data.Subset(ds, clean), batch_size=64, num_workers=2)
    assert sum(b.shape[0] for b in loader) == len(clean)  # every other block reads fine in the workers
    with pytest.raises(StoreError, match=r"shard_00000\.npy fails its checksum in block 500 of 1001 \(bytes "
                                         r"2048000-2052095\)"):
        for _ in DataLoader(ds, batch_size=64, shuffle=True, num_workers=2):
            pass
