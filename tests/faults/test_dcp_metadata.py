"""A crafted DCP ``.metadata`` never runs its payload: resume and load_model_tensors refuse it."""

import json
import os
import pickle

import pytest
import torch
from fault_helpers import ANSI, tiny

from torchsmith.distributed.checkpoint import (
    MARKER,
    DistCheckpointer,
    DistCheckpointError,
    file_digest,
    list_steps,
    load_model_tensors,
)
from torchsmith.distributed.safe_metadata import MetadataRefusedError, load_metadata
from torchsmith.engine.loop import build_step
from torchsmith.plan import Plan


class _Payload:
    marker = None

    def __reduce__(self):  # what a malicious .metadata does: call a function of its choice on load
        return (eval, (f"open({str(_Payload.marker)!r}, 'w').close()",))


def _save_one(root, step_fn):
    saver = DistCheckpointer(root, keep_last_k=None)
    saver.save(1, step_fn.parts, {"data_position": {"epoch": 0, "index": 1}})
    return root / "step_00000001"


def _poison(step_dir, marker):
    """An attacker who can write the directory rewrites the recorded checksum too: the
    restricted unpickler, not the checksum, is what must stop the payload."""
    _Payload.marker = marker
    (step_dir / ".metadata").write_bytes(pickle.dumps(_Payload()))
    info = json.loads((step_dir / MARKER).read_text())
    info["files"][".metadata"] = file_digest(step_dir / ".metadata")
    (step_dir / MARKER).write_text(json.dumps(info))


def test_malicious_metadata_is_refused_on_resume_and_never_executed(tmp_path, one_rank_group):
    w = tiny()
    step = build_step(w, Plan(), torch.device("cpu"))
    path = _save_one(tmp_path / "ckpt", step)
    assert (path / MARKER).is_file()
    marker = tmp_path / "pwned"
    _poison(path, marker)
    with pytest.raises(DistCheckpointError, match=r"refused to read .*step_00000001/\.metadata: it asks to load "
                                                  r"builtins\.eval") as err:
        DistCheckpointer(tmp_path / "ckpt").load_latest(build_step(w, Plan(), torch.device("cpu")).parts)
    assert not marker.exists()
    assert not ANSI.search(str(err.value))


def test_malicious_metadata_is_refused_by_load_model_tensors(tmp_path, one_rank_group):
    w = tiny()
    step = build_step(w, Plan(), torch.device("cpu"))
    path = _save_one(tmp_path / "ckpt", step)
    assert set(load_model_tensors(path)) == set(step.model.state_dict())  # a genuine file still loads
    marker = tmp_path / "pwned"
    _poison(path, marker)
    with pytest.raises(DistCheckpointError, match=r"\.metadata: it asks to load builtins\.eval"):
        load_model_tensors(path)
    assert not marker.exists()


def test_os_system_payload_and_garbage_are_refused(tmp_path):
    class Shell:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (tmp_path / ".metadata").write_bytes(pickle.dumps(Shell()))
    with pytest.raises(MetadataRefusedError, match=r"(posix|os)\.system"):
        load_metadata(tmp_path / ".metadata")
    assert not (tmp_path / "pwned").exists()
    (tmp_path / ".metadata").write_bytes(b"\x80\x05garbage")
    with pytest.raises(MetadataRefusedError, match="is not readable DCP metadata"):
        load_metadata(tmp_path / ".metadata")


def test_dcp_bit_flip_falls_back_to_the_previous_step_naming_the_file(tmp_path, one_rank_group):
    w = tiny()
    step = build_step(w, Plan(), torch.device("cpu"))
    saver = DistCheckpointer(tmp_path / "ckpt", keep_last_k=None)
    for s in (1, 2):
        saver.save(s, step.parts, {"data_position": {"epoch": 0, "index": s}})
    newest = list_steps(tmp_path / "ckpt")[-1][1]
    shard = next(newest.glob("__0_*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    loaded = DistCheckpointer(tmp_path / "ckpt").load_latest(build_step(w, Plan(), torch.device("cpu")).parts)
    assert loaded.path.name == "step_00000001"
    assert loaded.skipped[0][0] == newest and f"{shard.name} is truncated or corrupted" in loaded.skipped[0][1]
    # With the older one damaged too, resume stops and names both instead of starting over.
    old_shard = next(loaded.path.glob("__0_*.distcp"))
    old_shard.write_bytes(old_shard.read_bytes()[:-5])
    with pytest.raises(DistCheckpointError, match=r"(?s)every committed step failed its checksum.*step_00000002.*"
                                                  r"step_00000001"):
        DistCheckpointer(tmp_path / "ckpt").load_latest(build_step(w, Plan(), torch.device("cpu")).parts)
