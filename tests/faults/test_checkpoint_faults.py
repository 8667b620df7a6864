"""Checkpoints under faults: bit flips, missing keys, other runs, other plans, bad directories, full disks."""

import errno
import json
import os
import time

import pytest
import torch
from fault_helpers import cli, one_line_error, tiny, write_workload_file

from terminal_text import unwrapped
from torchsmith.engine import checkpoint as ckpt_mod
from torchsmith.engine.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from torchsmith.engine.identity import CheckpointDirError, ResumeMismatchError
from torchsmith.engine.loop import run
from torchsmith.engine.manifest import manifest_path, read_manifest, write_manifest
from torchsmith.plan import Plan, Threads


def _flip(path, offset_from_end=200):
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0x40  # one exponent bit of some tensor byte
    path.write_bytes(bytes(data))


def test_bit_flip_is_caught_by_sha256_and_resume_falls_back_naming_the_file(tmp_path):
    w = tiny()
    run(w, steps=10, checkpoint_dir=tmp_path, checkpoint_every=5)
    bad = tmp_path / "step_00000010.pt"
    _flip(bad)
    with pytest.raises(CheckpointError, match=r"step_00000010\.pt is truncated or corrupted: .* its manifest records"):
        load_checkpoint(bad)
    resumed = run(w, steps=12, checkpoint_dir=tmp_path, resume=True)
    assert resumed.start_step == 5 and resumed.resumed_from == tmp_path / "step_00000005.pt"
    assert resumed.skipped_checkpoints[0][0] == bad and "sha256" in resumed.skipped_checkpoints[0][1]
    assert resumed.losses == run(w, steps=12).losses[5:]


def test_checkpoint_missing_keys_falls_back_to_the_older_good_one(tmp_path):
    w = tiny()
    run(w, steps=4, checkpoint_dir=tmp_path, checkpoint_every=2)
    newest = tmp_path / "step_00000004.pt"
    state = torch.load(newest, weights_only=True)
    del state["optimizer"], state["model"]["0.weight"]
    torch.save(state, newest)
    write_manifest(newest, 4, state["run_id"], state["workload_fingerprint"], state["plan_fingerprint"])
    resumed = run(w, steps=5, checkpoint_dir=tmp_path, resume=True)
    assert resumed.start_step == 2
    assert resumed.skipped_checkpoints[0][0] == newest and "'optimizer'" in resumed.skipped_checkpoints[0][1]


def test_resume_with_other_plan_or_workload_is_refused_unless_forced(tmp_path):
    run(tiny(), steps=2, checkpoint_dir=tmp_path)
    with pytest.raises(ResumeMismatchError, match=r"(?s)refused to resume from .*step_00000002\.pt: .*plan fingerprint"
                                                  r".*--force"):
        run(tiny(), Plan(threads=Threads(intra_op=1)), steps=3, checkpoint_dir=tmp_path, resume=True)
    with pytest.raises(ResumeMismatchError, match=r"workload fingerprint"):  # same shapes, other learning rate
        run(tiny(lr=0.5), steps=3, checkpoint_dir=tmp_path, resume=True)
    forced = run(tiny(lr=0.5), steps=3, checkpoint_dir=tmp_path, resume=True, force=True)
    assert forced.start_step == 2


def test_resume_with_other_architecture_names_the_file_in_one_line(tmp_path):
    ckdir = tmp_path / "ck"
    run(tiny(width=4), steps=2, checkpoint_dir=ckdir)
    spec = write_workload_file(tmp_path / "wide.py", f"import sys\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                               "from fault_helpers import tiny\n"
                               "def workload():\n    return tiny(width=8)\n")
    code, _, err = cli("run", spec, "--steps", "3", "--checkpoint-dir", ckdir, "--resume")
    assert code == 2 and "step_00000002.pt" in one_line_error(err) and "workload fingerprint" in err
    code, _, err = cli("run", spec, "--steps", "3", "--checkpoint-dir", ckdir, "--resume", "--force")
    assert code == 2 and "step_00000002.pt does not fit this model" in one_line_error(err)


def test_resume_that_finds_nothing_says_so(tmp_path):
    result = run(tiny(), steps=2, checkpoint_dir=tmp_path / "missing", resume=True)
    assert result.start_step == 0 and "found no checkpoint" in result.resume_note
    code, out, _ = cli("run", "mlp", "--steps", "1", "--checkpoint-dir", tmp_path / "missing2", "--resume")
    assert code == 0 and "nothing to resume, training starts at step 0" in unwrapped(out)


def test_fresh_run_into_another_runs_directory_refuses_unless_overwrite(tmp_path):
    run(tiny(), steps=20, checkpoint_dir=tmp_path, checkpoint_every=5)
    with pytest.raises(CheckpointDirError, match=r"(?s)already holds 3 checkpoint\(s\) \(newest step_00000020\.pt\)"
                                                 r".*--resume.*--overwrite"):
        run(tiny(), steps=10, checkpoint_dir=tmp_path, checkpoint_every=5)
    run(tiny(), steps=10, checkpoint_dir=tmp_path, checkpoint_every=5, overwrite=True)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000005.pt", "step_00000010.pt"]
    assert run(tiny(), steps=10, checkpoint_dir=tmp_path, resume=True).start_step == 10  # resumes its own


def test_pruning_only_touches_this_runs_files(tmp_path):
    for step, owner in ((15, "old"), (20, "old"), (5, "new"), (10, "new"), (25, "new")):
        save_checkpoint(tmp_path, step, {"x": torch.ones(1)}, run_id=owner)
    gone = prune_checkpoints(tmp_path, keep_last_k=2, run_id="new")
    assert [p.name for p in gone] == ["step_00000005.pt"]
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "step_00000010.pt", "step_00000015.pt", "step_00000020.pt", "step_00000025.pt"]
    assert not manifest_path(tmp_path / "step_00000005.pt").exists()


def test_checkpoint_dir_that_is_a_file_fails_before_step_one(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    steps = []
    from torchsmith.engine.loop import RunCallbacks

    with pytest.raises(CheckpointDirError, match=r"--checkpoint-dir .*afile is a file"):
        run(tiny(), steps=3, checkpoint_dir=target, callbacks=RunCallbacks(on_step=steps.append))
    assert steps == []
    code, _, err = cli("run", "mlp", "--steps", "2", "--checkpoint-dir", target)
    assert code == 2 and "afile is a file" in one_line_error(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_read_only_checkpoint_dir_fails_before_step_one(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(CheckpointDirError, match="is not writable"):
        run(tiny(), steps=2, checkpoint_dir=ro)


def test_read_only_file_system_fails_before_step_one():
    if os.access("/proc/sys", os.W_OK) and os.geteuid() != 0:
        pytest.skip("no read-only file system to try")
    with pytest.raises(CheckpointDirError, match=r"--checkpoint-dir /proc/\S+ is not writable"):
        run(tiny(), steps=2, checkpoint_dir="/proc/torchsmith-ckpt")


def test_disk_full_while_saving_is_one_line_naming_the_file(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_mod.torch, "save", full)
    with pytest.raises(CheckpointError, match=r"could not write checkpoint .*step_00000002\.pt: the disk is full"):
        run(tiny(), steps=2, checkpoint_dir=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_orphan_temp_files_of_a_killed_save_are_removed_on_the_next_save(tmp_path):
    orphan = tmp_path / ".step_00000004.pt.ab12cd34.tmp"      # left by a SIGKILL mid-write
    live = tmp_path / ".step_00000009.pt.zz99yy88.tmp"        # another process writing right now
    foreign = tmp_path / "notes.tmp"                           # not our name pattern
    for p in (orphan, live, foreign):
        p.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    os.utime(foreign, (old, old))
    save_checkpoint(tmp_path, 1, {"x": torch.ones(1)}, run_id="r")
    assert not orphan.exists() and live.exists() and foreign.exists()


def test_manifest_records_run_identity(tmp_path):
    run(tiny(), steps=2, checkpoint_dir=tmp_path)
    m = read_manifest(tmp_path / "step_00000002.pt")
    raw = json.loads(manifest_path(tmp_path / "step_00000002.pt").read_text())
    assert m.step == 2 and len(m.sha256) == 64 and m.run_id and m.workload and m.plan
    assert raw["bytes"] == (tmp_path / "step_00000002.pt").stat().st_size


def test_any_atomic_write_removes_its_own_orphans(tmp_path):
    from torchsmith.atomic import atomic_write_text

    orphan = tmp_path / ".plan.json.k3j4h5g6.tmp"
    orphan.write_text("{half")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    atomic_write_text(tmp_path / "plan.json", "{}")
    assert not orphan.exists() and (tmp_path / "plan.json").read_text() == "{}"
