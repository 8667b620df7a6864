"""Block checksums: a read verifies the blocks it touches, once; format-1 stores load and upgrade."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from typer.testing import CliRunner

from terminal_text import unwrapped
from torchsmith.data.checksum import DEFAULT_BLOCK_BYTES, file_digests
from torchsmith.data.index_format import FORMAT_VERSION, WHOLE_FILE_SHA256
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays
from torchsmith.data.store import INDEX_NAME, StoreError, read_index
from torchsmith.data.upgrade import upgrade_store
from torchsmith.data.verify import verify_store

FIXTURES = Path(__file__).parent / "fixtures"
BLOCK = 4096
SAMPLES = np.arange(2000 * 25, dtype=np.float32).reshape(2000, 25)  # 100 bytes a sample: some straddle blocks
SAMPLE_BYTES = 100


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    pack_arrays(SAMPLES, path, block_bytes=BLOCK)  # one shard of 200,128 bytes: 49 blocks
    return path


def _head(store: Path) -> int:
    return int(np.load(store / "shard_00000.npy", mmap_mode="r").offset)  # the .npy header's length


def _samples_in(store: Path, block: int) -> tuple[list[int], list[int]]:
    """Samples wholly inside ``block``, and samples that cross one of its edges."""
    head = _head(store)
    lo, hi = block * BLOCK, (block + 1) * BLOCK
    starts = head + np.arange(len(SAMPLES)) * SAMPLE_BYTES
    stops = starts + SAMPLE_BYTES
    inside = np.flatnonzero((starts >= lo) & (stops <= hi)).tolist()
    crossing = np.flatnonzero((starts < lo) & (stops > lo) | (starts < hi) & (stops > hi)).tolist()
    return inside, crossing


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def test_index_records_one_digest_per_block(store):
    index = read_index(store)
    record = index.shards[0].data
    assert (index.format_version, index.block_bytes, record.sha256) == (FORMAT_VERSION, BLOCK, None)
    assert record.blocks == file_digests(store / record.name, BLOCK) and len(record.blocks) == 49 * 32
    assert read_index(pack_arrays(SAMPLES[:3], store.parent / "d") and store.parent / "d").block_bytes == (
        DEFAULT_BLOCK_BYTES)
    with pytest.raises(StoreError, match="block_bytes is 1000; a checksummed block is a power of two >= 4096"):
        pack_arrays(SAMPLES, store.parent / "bad", block_bytes=1000)


def test_a_read_verifies_only_the_blocks_it_touches(store):
    ds = MmapDataset(store)
    inside, crossing = _samples_in(store, 20)
    ds[inside[0]]
    check = ds._blocks[0][0]
    assert np.flatnonzero(check.verified).tolist() == [0, 20]  # the header's block, then the sample's
    ds[crossing[-1]]  # a sample that spans blocks 20 and 21 verifies both
    assert np.flatnonzero(check.verified).tolist() == [0, 20, 21]
    assert check.remaining == 49 - 3
    ds[list(range(len(SAMPLES)))]  # everything: then the steady state checks nothing
    assert check.done and check.verified.all()


def test_a_flipped_bit_is_caught_on_the_first_read_of_its_block_and_not_before(store):
    shard = store / "shard_00000.npy"
    _flip(shard, 30 * BLOCK + 7)
    ds = MmapDataset(store)
    inside, crossing = _samples_in(store, 30)
    others = [i for i in range(len(SAMPLES)) if i not in set(inside + crossing)]
    assert torch.equal(ds[others], torch.from_numpy(SAMPLES[others]))  # every other block reads and verifies
    assert ds._blocks[0][0].remaining == 1
    for i in (inside[0], crossing[0], crossing[-1]):  # caught by each read that touches block 30, every time
        with pytest.raises(StoreError) as err:
            ds[i]
        assert str(err.value).startswith(f"shard {shard} fails its checksum in block 30 of 49 "
                                         f"(bytes {30 * BLOCK}-{31 * BLOCK - 1}): xxh3-128 ")
        assert "Tip: the file changed after packing" in str(err.value) and "torchsmith data verify" in str(err.value)
    with pytest.raises(StoreError, match="block 30 of 49"):  # the DataLoader's batched path checks too
        list(DataLoader(ds, batch_size=64, shuffle=True))
    report = verify_store(store)
    assert report.problems == [f"shard {shard} fails its checksum in 1 of 49 block(s): 30 (bytes "
                               f"{30 * BLOCK}-{31 * BLOCK - 1})."]


def test_a_damaged_header_block_is_caught_when_the_shard_opens(store):
    _flip(store / "shard_00000.npy", 20)  # inside the .npy header: np.load would read it next
    with pytest.raises(StoreError, match="block 0 of 49"):
        MmapDataset(store)[1500]


def test_threads_share_one_map_of_verified_blocks(store):
    _flip(store / "shard_00000.npy", 40 * BLOCK + 1)
    ds = MmapDataset(store)
    inside, _ = _samples_in(store, 40)
    errors: list[str] = []
    perms = [np.random.default_rng(t).permutation(len(SAMPLES)) for t in range(8)]

    def reader(perm: np.ndarray) -> None:
        for batch in np.array_split(perm, 40):
            try:
                ds.__getitems__(batch.tolist())
            except StoreError as err:
                errors.append(str(err))

    threads = [threading.Thread(target=reader, args=(p,)) for p in perms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check = ds._blocks[0][0]
    assert check.remaining == 49 - int(check.verified.sum()) == 1  # every good block counted exactly once
    assert not check.verified[40] and errors and all("block 40 of 49" in e for e in errors)
    assert torch.equal(ds[[i for i in range(len(SAMPLES)) if i not in inside][:5]], torch.from_numpy(SAMPLES[:5]))


def test_ragged_reads_verify_their_offsets_and_bytes(tmp_path):
    from torchsmith.data.pack import pack_bytes

    blobs = [bytes([i % 251]) * (i * 37 % 300) for i in range(2000)]
    pack_bytes(blobs, tmp_path / "r", block_bytes=BLOCK)  # offsets: 16 KB, 4 blocks
    ds = MmapDataset(tmp_path / "r")
    assert [bytes(ds[i].numpy()) for i in range(0, 2000, 7)] == blobs[::7]
    offsets = tmp_path / "r" / "shard_00000.offs.npy"
    at = _head_of(offsets) + 8 * 1500 + 3  # sample 1499's end, sample 1500's start
    _flip(offsets, at)
    fresh = MmapDataset(tmp_path / "r")
    assert bytes(fresh[0].numpy()) == blobs[0] and bytes(fresh[1999].numpy()) == blobs[1999]
    with pytest.raises(StoreError, match=rf"shard_00000\.offs\.npy fails its checksum in block {at // BLOCK} of 4"):
        fresh[1500]
    # Verified: block 0 (header, sample 0) and 3 (the last offsets); 1 never read, 2 damaged.
    assert np.flatnonzero(fresh._blocks[0][1].verified).tolist() == [0, 3]
    assert not verify_store(tmp_path / "r").ok


def _head_of(path: Path) -> int:
    return int(np.load(path, mmap_mode="r").offset)


# --- format 1 (torchsmith 0.1.0): whole-shard SHA-256 ------------------------------------

def _v1(tmp_path: Path, name: str = "v1_fixed") -> Path:
    dest = tmp_path / name
    shutil.copytree(FIXTURES / name, dest)
    return dest


def test_a_format_1_store_still_loads_checks_sha256_and_says_how_to_upgrade(tmp_path, caplog):
    dest = _v1(tmp_path)
    truth = np.arange(60, dtype=np.float32).reshape(20, 3)
    with caplog.at_level(logging.WARNING, logger="torchsmith"):
        ds = MmapDataset(dest)
        MmapDataset(dest)  # one note per store and process, not one per open
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "format-1 store" in notes[0] and f"torchsmith data upgrade {dest}" in notes[0]
    assert torch.equal(ds[list(range(20))], torch.from_numpy(truth))
    assert ds._verified == {0, 1, 2} and not ds._blocks
    ragged = MmapDataset(_v1(tmp_path, "v1_ragged"))
    assert [bytes(ragged[i].numpy()) for i in range(4)] == [b"abc", b"", b"x" * 100, b"\x00\x01"]
    report = verify_store(dest)
    assert report.ok and report.format_version == WHOLE_FILE_SHA256 and "data upgrade" in report.notes[0]
    _flip(dest / "shard_00001.npy", 150)
    with pytest.raises(StoreError, match="shard_00001.npy fails its checksum: sha256"):
        MmapDataset(dest)[9]


def test_upgrade_rehashes_in_blocks_in_place_and_refuses_a_damaged_store(tmp_path):
    dest = _v1(tmp_path)
    shards_before = {p.name: p.read_bytes() for p in dest.glob("shard_*")}
    result = upgrade_store(dest, block_bytes=BLOCK)
    assert result.upgraded and result.index.format_version == FORMAT_VERSION
    index = read_index(dest)
    assert index == result.index and index.block_bytes == BLOCK and all(s.data.blocks for s in index.shards)
    assert {p.name: p.read_bytes() for p in dest.glob("shard_*")} == shards_before  # only the index changed
    assert sorted(p.name for p in dest.iterdir()) == sorted([*shards_before, INDEX_NAME])  # no temp left
    assert torch.equal(MmapDataset(dest)[list(range(20))], torch.arange(60.0).reshape(20, 3))
    assert verify_store(dest).ok and not verify_store(dest).notes
    assert not upgrade_store(dest).upgraded  # twice: nothing to do

    ragged = _v1(tmp_path, "v1_ragged")
    upgrade_store(ragged)
    assert [bytes(MmapDataset(ragged)[i].numpy()) for i in range(4)] == [b"abc", b"", b"x" * 100, b"\x00\x01"]

    damaged = _v1(tmp_path / "x")
    _flip(damaged / "shard_00002.npy", 140)
    old_index = (damaged / INDEX_NAME).read_bytes()
    with pytest.raises(StoreError, match=r"shard_00002.npy fails its checksum: sha256 .* was not upgraded"):
        upgrade_store(damaged)
    assert (damaged / INDEX_NAME).read_bytes() == old_index


def test_cli_upgrade_and_verify(tmp_path):
    from torchsmith.cli import app

    dest = _v1(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["data", "verify", str(dest)])
    assert r.exit_code == 0 and "data upgrade" in r.output, r.output
    r = runner.invoke(app, ["data", "upgrade", str(dest)])
    assert r.exit_code == 0 and "upgraded" in r.output and "format 2" in r.output, r.output
    assert json.loads((dest / INDEX_NAME).read_text())["block_hash"] == "xxh3-128"
    r = runner.invoke(app, ["data", "upgrade", str(dest)])
    assert r.exit_code == 0 and "nothing to do" in r.output, r.output
    _flip(dest / "shard_00000.npy", 200)
    r = runner.invoke(app, ["data", "verify", str(dest)])
    flat = unwrapped(r.output)  # rich wraps long lines at spaces
    assert r.exit_code == 1 and "fails its checksum in 1 of 1 block(s): 0 (bytes 0-223)" in flat, r.output


def test_a_cached_format_1_image_store_is_upgraded_once_on_use(tmp_path, monkeypatch):
    from dataclasses import replace

    from torchsmith.data.index_format import FileRecord
    from torchsmith.data.store import file_sha256, write_index
    from torchsmith.workloads.cnn_pipeline import image_store

    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path))
    images = np.random.default_rng(0).integers(0, 255, (6, 3, 8, 8), dtype=np.uint8)
    path = image_store("test-upgrade", lambda: [images])
    # Rewrite its index as torchsmith 0.1.0 wrote it (the format of fixtures/v1_*): one SHA-256 per file.
    index = read_index(path)
    old = replace(index, format_version=WHOLE_FILE_SHA256, block_bytes=None, shards=tuple(
        replace(s, data=FileRecord(name=s.data.name, bytes=s.data.bytes, sha256=file_sha256(path / s.data.name)),
                offsets=FileRecord(name=s.offsets.name, bytes=s.offsets.bytes,
                                   sha256=file_sha256(path / s.offsets.name)) if s.offsets else None)
        for s in index.shards))
    write_index(path, old)
    assert read_index(path).format_version == WHOLE_FILE_SHA256
    assert image_store("test-upgrade", lambda: pytest.fail("a cached store is not rebuilt")) == path
    assert read_index(path).format_version == FORMAT_VERSION and read_index(path).meta == index.meta
