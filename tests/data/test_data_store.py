"""Packed store: round trips, zero-copy reads, atomic writes, and errors that name the file."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays, pack_bytes, pack_npy_folder, pack_source, pack_tokens
from torchsmith.data.store import StoreError, StoreWriter, read_index
from torchsmith.data.verify import verify_store

SAMPLES = np.arange(1000 * 24, dtype=np.float32).reshape(1000, 2, 3, 4)  # sample i holds 24*i .. 24*i+23


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    pack_arrays(SAMPLES, path, shard_bytes=96 * 100)  # 100 samples per shard -> 10 shards
    return path


def test_round_trip_many_shards_and_batches(store):
    index = read_index(store)
    assert (index.num_samples, index.shape, len(index.shards), index.dtype) == (1000, (2, 3, 4), 10, "<f4")
    ds = MmapDataset(store)
    assert len(ds) == 1000
    for i in (0, 99, 100, 555, 999, -1):
        assert torch.equal(ds[i], torch.from_numpy(SAMPLES[i]))
    idx = [5, 950, 101, 5, 0]  # across shards, repeated, unsorted
    assert torch.equal(ds[idx], torch.from_numpy(SAMPLES[idx]))
    assert torch.equal(ds[[7, 8, 9]], torch.from_numpy(SAMPLES[7:10]))  # one shard: the single-gather path
    with pytest.raises(IndexError, match="1000 samples"):
        ds[1000]


def test_sample_is_a_view_of_the_mapping_not_a_copy(store):
    ds = MmapDataset(store)
    x = ds[123]
    shard = ds._shard(1)[0]
    assert isinstance(shard, np.memmap)
    assert np.shares_memory(x.numpy(), shard)
    # Copy-on-write mapping: writing through a tensor never reaches the file.
    x.fill_(-1)
    assert torch.equal(MmapDataset(store)[123], torch.from_numpy(SAMPLES[123]))


def test_pickled_dataset_carries_no_data(store):
    ds = MmapDataset(store)
    ds[[0, 500, 999]]  # open every shard it touches
    blob = pickle.dumps(ds)
    assert len(blob) < 16_000 < SAMPLES.nbytes // 4, len(blob)  # workers re-map; they get no copy
    clone = pickle.loads(blob)
    assert torch.equal(clone[500], torch.from_numpy(SAMPLES[500]))
    # Blocks verified before the fork are not redone in the workers.
    assert sorted(clone._blocks) == sorted(ds._blocks) == [0, 5, 9]
    assert all((clone._blocks[k][0].verified == ds._blocks[k][0].verified).all() for k in ds._blocks)


def test_npy_folder_tokens_and_ragged(tmp_path):
    folder = tmp_path / "npys"
    folder.mkdir()
    for i in range(7):
        np.save(folder / f"{i:02d}.npy", np.full((3,), i, np.int16))
    idx = pack_source(folder, tmp_path / "a")
    assert idx.num_samples == 7 and torch.equal(MmapDataset(tmp_path / "a")[4], torch.full((3,), 4, dtype=torch.int16))

    text = tmp_path / "t.txt"
    text.write_text("hello world, hello store!" * 10)
    idx = pack_tokens(text, tmp_path / "b", tokenizer="chars", seq_len=16)
    vocab = idx.meta["vocab"]
    first = MmapDataset(tmp_path / "b")[0]
    assert "".join(vocab[int(t)] for t in first) == ("hello world, hello store!" * 10)[:16]
    assert idx.num_samples == 250 // 16 and idx.meta["dropped_tail_tokens"] == 250 % 16
    assert bytes(MmapDataset(pack_tokens(text, tmp_path / "c", seq_len=5) and tmp_path / "c")[1].numpy()) == b" worl"

    blobs = [b"abc", b"", b"x" * 1000, b"\x00\x01"]
    pack_bytes(blobs, tmp_path / "d", shard_bytes=1000)
    ds = MmapDataset(tmp_path / "d")
    assert [bytes(ds[i].numpy()) for i in range(4)] == blobs and len(read_index(tmp_path / "d").shards) == 2


def test_npy_folder_refuses_mixed_shapes_and_pickles(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    np.save(folder / "a.npy", np.zeros(3))
    np.save(folder / "b.npy", np.zeros(4))
    with pytest.raises(StoreError, match="b.npy"):
        pack_npy_folder(folder, tmp_path / "s")
    pickled = tmp_path / "obj"
    pickled.mkdir()
    np.save(pickled / "a.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(StoreError, match="unpickling"):
        pack_npy_folder(pickled, tmp_path / "s2")


def test_interrupted_pack_never_looks_valid(tmp_path):
    dest = tmp_path / "s"

    def samples():
        for i in range(250):
            if i == 230:
                raise KeyboardInterrupt  # the user hits ^C mid-pack
            yield np.full((10,), i, np.float32)

    with pytest.raises(KeyboardInterrupt):
        with StoreWriter(dest, dtype=np.float32, shape=(10,), shard_bytes=400) as w:
            w.add_many(samples())
    assert len(list(dest.glob("shard_*.npy"))) == 23  # complete shards were written ...
    assert not list(dest.glob(".*tmp"))  # ... no temp file is left ...
    with pytest.raises(StoreError, match="interrupted pack"):  # ... and there is no index
        MmapDataset(dest)
    # Re-packing over a good store builds beside it: an interruption leaves the old store whole.
    pack_arrays(SAMPLES[:10], tmp_path / "good")
    with pytest.raises(KeyboardInterrupt):
        with StoreWriter(tmp_path / "good", dtype=np.float32, shape=(10,), shard_bytes=400, overwrite=True) as w:
            w.add_many(samples())
    assert read_index(tmp_path / "good").num_samples == 10
    assert not list(tmp_path.glob(".good.packing-*"))  # no staging directory left
    with pytest.raises(StoreError, match="not empty"):
        pack_arrays(SAMPLES[:10], tmp_path / "good")


def test_missing_truncated_corrupt_and_unknown_version_name_the_file(store, tmp_path):
    shard = store / "shard_00003.npy"
    good = shard.read_bytes()

    shard.unlink()
    with pytest.raises(StoreError, match="shard_00003.npy is missing"):
        MmapDataset(store)

    shard.write_bytes(good[:-7])
    with pytest.raises(StoreError, match=r"shard_00003.npy is truncated: \d+ bytes, the index says \d+"):
        MmapDataset(store)

    corrupt = bytearray(good)
    corrupt[-5] ^= 0xFF  # same size, one flipped byte in sample 399
    shard.write_bytes(bytes(corrupt))
    ds = MmapDataset(store)  # sizes match: opens
    assert torch.equal(ds[0], torch.from_numpy(SAMPLES[0]))  # other shards read fine
    with pytest.raises(StoreError, match="shard_00003.npy fails its checksum"):
        ds[350]  # first touch of shard 3
    report = verify_store(store)
    assert not report.ok and len(report.problems) == 1 and "shard_00003.npy" in report.problems[0]
    shard.write_bytes(good)
    assert verify_store(store).ok

    index = json.loads((store / "index.json").read_text())
    index["format_version"] = 99
    (store / "index.json").write_text(json.dumps(index))
    with pytest.raises(StoreError, match="index.json: format_version 99 is unknown"):
        MmapDataset(store)


def test_unchecked_open_skips_checksums_but_not_sizes(store):
    shard = store / "shard_00000.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x01
    shard.write_bytes(bytes(data))
    assert MmapDataset(store, check="none")[0].shape == (2, 3, 4)
    with pytest.raises(StoreError, match="checksum"):
        MmapDataset(store)[0]


def test_a_pickled_shard_is_refused_never_unpickled(store):
    # Even with an index that vouches for it (size and checksum updated), an object array is refused.
    shard = store / "shard_00002.npy"
    np.save(shard, np.array([object()] * 3 + [{"evil": 1}], dtype=object), allow_pickle=True)
    index = json.loads((store / "index.json").read_text())
    from torchsmith.data.checksum import file_digests

    index["shards"][2]["data"].update(bytes=shard.stat().st_size, blocks=file_digests(shard, index["block_bytes"]))
    (store / "index.json").write_text(json.dumps(index))
    with pytest.raises(StoreError, match="shard_00002.npy is not a readable .npy file"):
        MmapDataset(store)[250]
