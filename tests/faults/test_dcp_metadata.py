"""A crafted DCP ``.metadata`` never runs its payload: resume and load_model_tensors refuse it."""

import os
import pickle

import pytest
import torch

from fault_helpers import ANSI, tiny
from torchsmith.distributed.checkpoint import DistCheckpointError, DistCheckpointer, MARKER, load_model_tensors
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
    _Payload.marker = marker
    (step_dir / ".metadata").write_bytes(pickle.dumps(_Payload()))


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
