"""Property-based: arbitrary bytes and mutations of valid files give only the typed errors.

Never another exception, and never a silent load: a mutated file either raises the typed error
or parses to exactly what a valid file says (for plans and indexes, a mutation may well produce
another valid file; for checkpoints, whose SHA-256 is recorded, any change of the data is caught).
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays
from torchsmith.data.store import INDEX_NAME, StoreError, read_index
from torchsmith.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchsmith.engine.manifest import ManifestError, manifest_path, read_manifest
from torchsmith.plan import Autocast, Compile, Plan, PlanError, Threads

SETTINGS = settings(max_examples=int(os.environ.get("TORCHSMITH_HYPOTHESIS_EXAMPLES", "100")), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


def _mutations(valid: dict):
    """A valid JSON object with one key dropped, one value replaced, or one key added."""
    keys = sorted(valid)
    return st.one_of(
        st.sampled_from(keys).map(lambda k: {x: v for x, v in valid.items() if x != k}),
        st.tuples(st.sampled_from(keys), JSON).map(lambda kv: {**valid, kv[0]: kv[1]}),
        st.tuples(st.text(max_size=8), JSON).map(lambda kv: {**valid, kv[0]: kv[1]}),
    )


def _byte_edits(data: bytes):
    """Truncate, flip a bit, or splice random bytes into ``data``."""
    n = len(data)
    return st.one_of(
        st.integers(0, n - 1).map(lambda i: data[:i]),
        st.tuples(st.integers(0, n - 1), st.integers(0, 7)).map(
            lambda t: data[:t[0]] + bytes([data[t[0]] ^ (1 << t[1])]) + data[t[0] + 1:]),
        st.tuples(st.integers(0, n), st.binary(min_size=1, max_size=16)).map(
            lambda t: data[:t[0]] + t[1] + data[t[0]:]),
    )


# --- plans ---------------------------------------------------------------------------

VALID_PLAN = Plan(threads=Threads(intra_op=2), precision=Autocast(dtype="bfloat16"), compile=Compile(enabled=True))


def _load_plan(tmp: Path, data: bytes):
    path = tmp / "plan.json"
    path.write_bytes(data)
    try:
        return Plan.load(path)
    except PlanError:
        return None


@SETTINGS
@given(data=st.binary(max_size=256))
def test_plan_from_arbitrary_bytes_is_a_plan_or_a_plan_error(tmp_path, data):
    plan = _load_plan(tmp_path, data)
    assert plan is None or isinstance(plan, Plan)


@SETTINGS
@given(st.data())
def test_plan_mutations_parse_to_a_valid_plan_or_raise_plan_error(tmp_path, data):
    valid = VALID_PLAN.to_dict()
    section = data.draw(st.sampled_from(["threads", "precision", "compile", "root"]))
    if section == "root":
        mutated = data.draw(_mutations(valid))
    else:
        mutated = {**valid, section: data.draw(_mutations(valid[section]))}
    plan = _load_plan(tmp_path, json.dumps(mutated, allow_nan=True).encode())
    if plan is not None:  # accepted: it must round-trip, i.e. every field passed validation
        assert Plan.from_dict(plan.to_dict()) == plan


@SETTINGS
@given(edit=_byte_edits(json.dumps(VALID_PLAN.to_dict()).encode()))
def test_plan_byte_edits_never_escape_as_another_exception(tmp_path, edit):
    _load_plan(tmp_path, edit)


# --- checkpoints and manifests -------------------------------------------------------

_CKPT = Path(tempfile.mkdtemp(prefix="ts-prop-ckpt-"))
_PT = save_checkpoint(_CKPT, 3, {"model": {"w": torch.arange(6.0)}, "data_position": {"epoch": 0, "index": 3}},
                      run_id="r1", workload="a" * 64, plan="b" * 64)
PT_BYTES, MANIFEST_BYTES = _PT.read_bytes(), manifest_path(_PT).read_bytes()


def _copy_checkpoint(tmp: Path, pt: bytes, manifest: bytes) -> Path:
    path = tmp / "step_00000003.pt"
    path.write_bytes(pt)
    manifest_path(path).write_bytes(manifest)
    return path


@SETTINGS
@given(data=st.binary(max_size=300))
def test_manifest_from_arbitrary_bytes_is_a_manifest_error(tmp_path, data):
    path = _copy_checkpoint(tmp_path, PT_BYTES, data)
    with pytest.raises((ManifestError,)):
        read_manifest(path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


@SETTINGS
@given(mutated=_mutations(json.loads(MANIFEST_BYTES)))
def test_manifest_mutations_never_load_a_checkpoint_that_does_not_match(tmp_path, mutated):
    path = _copy_checkpoint(tmp_path, PT_BYTES, json.dumps(mutated).encode())
    try:
        state = load_checkpoint(path)
    except CheckpointError:
        return
    # Loaded: then the manifest still names this file, its size and its SHA-256 exactly.
    original = json.loads(MANIFEST_BYTES)
    assert all(mutated[k] == original[k] for k in ("file", "bytes", "sha256", "step"))
    assert torch.equal(state["model"]["w"], torch.arange(6.0))


@SETTINGS
@given(edit=_byte_edits(PT_BYTES))
def test_any_change_to_checkpoint_bytes_is_refused(tmp_path, edit):
    assume(edit != PT_BYTES)
    path = _copy_checkpoint(tmp_path, edit, MANIFEST_BYTES)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


# --- store indexes -------------------------------------------------------------------

_STORE = Path(tempfile.mkdtemp(prefix="ts-prop-store-")) / "store"
pack_arrays(np.arange(60, dtype=np.float32).reshape(20, 3), _STORE, shard_bytes=48)
INDEX_BYTES = (_STORE / INDEX_NAME).read_bytes()


def _store_with_index(tmp: Path, index: bytes) -> Path:
    dest = tmp / "store"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(_STORE, dest)
    (dest / INDEX_NAME).write_bytes(index)
    return dest


def _open_and_read(dest: Path):
    try:
        ds = MmapDataset(dest)
        return [ds[i] for i in range(len(ds))]
    except StoreError:
        return None


@SETTINGS
@given(data=st.binary(max_size=300))
def test_store_index_from_arbitrary_bytes_is_a_store_error(tmp_path, data):
    dest = _store_with_index(tmp_path, data)
    with pytest.raises(StoreError):
        read_index(dest)


@SETTINGS
@given(st.data())
def test_store_index_mutations_give_store_errors_or_the_true_samples(tmp_path, data):
    valid = json.loads(INDEX_BYTES)
    where = data.draw(st.sampled_from(["root", "shard", "file"]))
    if where == "root":
        mutated = data.draw(_mutations(valid))
    else:
        shards = list(valid["shards"])
        i = data.draw(st.integers(0, len(shards) - 1))
        shards[i] = (data.draw(_mutations(shards[i])) if where == "shard"
                     else {**shards[i], "data": data.draw(_mutations(shards[i]["data"]))})
        mutated = {**valid, "shards": shards}
    samples = _open_and_read(_store_with_index(tmp_path, json.dumps(mutated, allow_nan=True).encode()))
    if samples is not None:  # opened and read: then it read exactly the packed samples
        truth = np.arange(60, dtype=np.float32).reshape(20, 3)
        assert len(samples) == 20 and all(np.array_equal(s.numpy(), truth[i]) for i, s in enumerate(samples))
