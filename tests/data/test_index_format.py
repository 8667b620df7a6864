"""index.json parsing: each damaged field is a StoreError naming that field, word for word.

The messages are pinned against a store written by torchsmith 0.1.0 (format 1, whole-shard
SHA-256, in ``fixtures/v1_fixed`` and ``fixtures/v1_ragged``) and against a store packed now.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from torchsmith.data.store import INDEX_NAME, StoreError, read_index

FIXTURES = Path(__file__).parent / "fixtures"
TIP = "Tip: re-pack the source; index.json is written by `torchsmith data pack`."


def _store(tmp_path: Path, name: str) -> tuple[Path, dict]:
    dest = tmp_path / name
    shutil.copytree(FIXTURES / name, dest)
    return dest, json.loads((dest / INDEX_NAME).read_text())


def _set(path: str, value):
    """An edit of the index at a dotted path (``shards.0.data.name``); ``...`` deletes the key."""
    def edit(index: dict) -> dict:
        index = copy.deepcopy(index)
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = index
        for p in parents:
            node = node[p]
        if value is ...:
            del node[last]
        else:
            node[last] = value
        return index
    return edit


# (store, edit, the message after "is not a valid store index: ")
V1_CASES = [
    ("v1_fixed", lambda ix: [ix], "it holds a list, expected an object"),
    ("v1_fixed", _set("dtype", ...), "key 'dtype' is missing"),
    ("v1_fixed", _set("shards", ...), "key 'shards' is missing"),
    ("v1_fixed", _set("dtype", "O"), "dtype 'O' is not a plain numeric dtype"),
    ("v1_fixed", _set("dtype", 7), "dtype 7 is not a plain numeric dtype"),
    ("v1_fixed", _set("dtype", "V0"), "dtype 'V0' is not a plain numeric dtype"),
    ("v1_fixed", _set("dtype", "no-such"), "dtype 'no-such' is not a plain numeric dtype"),
    ("v1_fixed", _set("shape", "3"), "shape is '3', expected a list of sizes or null"),
    ("v1_fixed", _set("shape", [3, -1]), "shape[] is -1, expected an integer >= 0"),
    ("v1_fixed", _set("shape", [3.0]), "shape[] is 3.0, expected an integer >= 0"),
    ("v1_fixed", _set("num_samples", True), "num_samples is True, expected an integer >= 0"),
    ("v1_fixed", _set("shards", {}), "shards is dict, expected a list"),
    ("v1_fixed", _set("shards.1", 5), "shards[1] is 5, expected {samples, data[, offsets]}"),
    ("v1_fixed", _set("shards.1.extra", 1), "shards[1] is {'samples': 8, 'data': {'name': 'shard_00001.npy', "
                                            "'bytes': 224, 'sha256': '"),
    ("v1_fixed", _set("shards.0.samples", -2), "shards[0].samples is -2, expected an integer >= 0"),
    ("v1_fixed", _set("shards.0.data", "x"), "shards[0].data is 'x', expected {name, bytes, sha256}"),
    ("v1_fixed", _set("shards.0.data.name", "../../etc/passwd"),
     "shards[0].data.name is '../../etc/passwd', expected shard_N.npy or shard_N.offs.npy in the store"),
    ("v1_fixed", _set("shards.0.data.sha256", "abc"), "shards[0].data.sha256 is 'abc', expected 64 hex digits"),
    ("v1_fixed", _set("shards.0.data.bytes", "224"), "shards[0].data.bytes is '224', expected an integer >= 0"),
    ("v1_fixed", _set("shards.0.offsets", {"name": "shard_00000.offs.npy", "bytes": 1, "sha256": "0" * 64}),
     "shards[0] has offsets, but the store is fixed-shape"),
    ("v1_ragged", _set("shards.1.offsets", ...), "shards[1] lacks offsets, but the store is ragged"),
    ("v1_ragged", _set("shards.1.offsets.bytes", -1), "shards[1].offsets.bytes is -1, expected an integer >= 0"),
    ("v1_fixed", _set("meta", []), "meta is list, expected an object"),
]


@pytest.mark.parametrize(("name", "edit", "message"), V1_CASES, ids=[c[2][:40] for c in V1_CASES])
def test_a_damaged_field_of_a_format_1_index_is_named(tmp_path, name, edit, message):
    dest, index = _store(tmp_path, name)
    (dest / INDEX_NAME).write_text(json.dumps(edit(index)))
    with pytest.raises(StoreError) as err:
        read_index(dest)
    assert str(err.value).startswith(f"{dest / INDEX_NAME} is not a valid store index: {message}"), str(err.value)
    assert str(err.value).endswith(TIP)


def test_count_and_version_errors_name_the_numbers(tmp_path):
    dest, index = _store(tmp_path, "v1_fixed")
    (dest / INDEX_NAME).write_text(json.dumps({**index, "num_samples": 21}))
    with pytest.raises(StoreError, match=re.escape(f"{dest / INDEX_NAME}: num_samples is 21 but the shards hold 20.")):
        read_index(dest)
    for version in (99, "1", None, True):
        (dest / INDEX_NAME).write_text(json.dumps({**index, "format_version": version}))
        with pytest.raises(StoreError, match=re.escape(f"{dest / INDEX_NAME}: format_version {version!r} is unknown")):
            read_index(dest)


def test_format_1_fixtures_parse_to_what_they_say(tmp_path):
    fixed = read_index(FIXTURES / "v1_fixed")
    assert (fixed.format_version, fixed.dtype, fixed.shape, fixed.num_samples) == (1, "<f4", (3,), 20)
    assert [s.samples for s in fixed.shards] == [8, 8, 4] and fixed.shards[0].offsets is None
    ragged = read_index(FIXTURES / "v1_ragged")
    assert ragged.ragged and ragged.shards[0].offsets is not None and ragged.num_samples == 4
    assert np.dtype(ragged.dtype) == np.uint8


@pytest.fixture(scope="module")
def v2_store(tmp_path_factory) -> Path:
    from torchsmith.data.pack import pack_arrays

    dest = tmp_path_factory.mktemp("v2") / "v2"
    pack_arrays(np.arange(3000, dtype=np.float32).reshape(1000, 3), dest, shard_bytes=6000, block_bytes=4096)
    return dest


V2_CASES = [
    (_set("block_hash", ...), "key 'block_hash' is missing"),
    (_set("block_bytes", ...), "key 'block_bytes' is missing"),
    (_set("block_hash", "sha256"), "block_hash is 'sha256', expected 'xxh3-128'"),
    (_set("block_bytes", 1000), "block_bytes is 1000, expected a power of two >= 4096"),
    (_set("block_bytes", 0), "block_bytes is 0, expected a power of two >= 4096"),
    (_set("block_bytes", 4096.0), "block_bytes is 4096.0, expected a power of two >= 4096"),
    (_set("shards.0.data.sha256", "0" * 64),
     "shards[0].data is {'name': 'shard_00000.npy', 'bytes': 6128, 'blocks': '"),
    (_set("shards.0.data.blocks", "xyz"), "shards[0].data.blocks is 'xyz', expected 32 hex digits per block"),
    (_set("shards.0.data.blocks", 7), "shards[0].data.blocks is 7, expected 32 hex digits per block"),
    (_set("shards.0.data.blocks", "0" * 32), "shards[0].data.blocks holds 1 block digest(s), but 6128 bytes in "
                                             "blocks of 4096 make 2"),
    (_set("block_bytes", 8192),
     "shards[0].data.blocks holds 2 block digest(s), but 6128 bytes in blocks of 8192 make 1"),
    (_set("shards.0.data.bytes", -1), "shards[0].data.bytes is -1, expected an integer >= 0"),
    (_set("shards.0.data.name", "index.json"),
     "shards[0].data.name is 'index.json', expected shard_N.npy or shard_N.offs.npy in the store"),
]


@pytest.mark.parametrize(("edit", "message"), V2_CASES, ids=[c[1][:40] for c in V2_CASES])
def test_a_damaged_field_of_a_format_2_index_is_named(tmp_path, v2_store, edit, message):
    dest = tmp_path / "s"
    shutil.copytree(v2_store, dest)
    index = json.loads((dest / INDEX_NAME).read_text())
    (dest / INDEX_NAME).write_text(json.dumps(edit(index)))
    with pytest.raises(StoreError) as err:
        read_index(dest)
    assert str(err.value).startswith(f"{dest / INDEX_NAME} is not a valid store index: {message}"), str(err.value)
    assert str(err.value).endswith(TIP)


def test_a_format_2_index_round_trips(v2_store):
    index = read_index(v2_store)
    assert (index.format_version, index.block_bytes, len(index.shards), index.meta) == (2, 4096, 2, {})
    assert json.loads((v2_store / INDEX_NAME).read_text()) == index.to_json()
