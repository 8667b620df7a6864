import os

import pytest
import torch
from toy_workloads import dropout_workload

from torchsmith.engine.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, save_checkpoint
from torchsmith.engine.loop import run
from torchsmith.engine.manifest import write_manifest


def test_resume_continues_bit_for_bit(tmp_path):
    w = dropout_workload()
    full = run(w, steps=20, eval_every=10)
    first = run(w, steps=10, checkpoint_dir=tmp_path)
    second = run(w, steps=20, checkpoint_dir=tmp_path, resume=True, eval_every=10)
    assert second.start_step == 10 and second.resumed_from == tmp_path / "step_00000010.pt"
    # 200 samples / 32 = 7 batches per epoch: the resume point sits mid-epoch and the run
    # crosses two epoch boundaries, each reshuffled from the global RNG.
    assert first.losses + second.losses == full.losses
    assert second.val_losses[-1] == full.val_losses[-1]


def test_resume_with_nothing_left_to_do_and_bad_step_counts(tmp_path):
    w = dropout_workload()
    run(w, steps=4, checkpoint_dir=tmp_path)
    again = run(w, steps=4, checkpoint_dir=tmp_path, resume=True)
    assert again.losses == [] and again.start_step == 4
    with pytest.raises(ValueError, match="below the checkpoint's step 4"):
        run(w, steps=3, checkpoint_dir=tmp_path, resume=True)
    with pytest.raises(ValueError, match="needs a checkpoint_dir"):
        run(w, steps=3, resume=True)


def test_truncated_checkpoint_is_named_and_the_previous_one_used(tmp_path):
    w = dropout_workload()
    run(w, steps=6, checkpoint_dir=tmp_path, checkpoint_every=3)
    newest = tmp_path / "step_00000006.pt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"step_00000006\.pt is truncated or corrupted"):
        load_checkpoint(newest)
    resumed = run(w, steps=8, checkpoint_dir=tmp_path, resume=True)
    assert resumed.start_step == 3
    assert resumed.skipped_checkpoints[0][0] == newest
    reference = run(w, steps=8)
    assert resumed.losses == reference.losses[3:]


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def test_malicious_pickle_is_refused_and_never_executed(tmp_path):
    _Payload.marker = tmp_path / "pwned"
    path = tmp_path / "step_00000001.pt"
    torch.save({"format_version": 1, "step": 1, "model": _Payload()}, path)
    write_manifest(path, 1, "someone")  # a valid SHA-256: the refusal must come from weights_only itself
    with pytest.raises(CheckpointError, match="refused to load .* never unpickles arbitrary objects"):
        load_checkpoint(path)
    assert not _Payload.marker.exists()
    # resume: the only checkpoint is unusable, and the error says so instead of unpickling it.
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        run(dropout_workload(), steps=2, checkpoint_dir=tmp_path, resume=True)
    assert not _Payload.marker.exists()


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    save_checkpoint(tmp_path, 1, {"x": torch.ones(3)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001.pt", "step_00000001.pt.json"]
    (tmp_path / ".step_00000002.pt.abc.tmp").write_bytes(b"partial")  # a crash mid-write
    assert list_checkpoints(tmp_path) == [tmp_path / "step_00000001.pt"]


def test_only_the_newest_k_checkpoints_are_kept(tmp_path):
    run(dropout_workload(), steps=6, checkpoint_dir=tmp_path, checkpoint_every=1, keep_last_k=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000005.pt", "step_00000006.pt"]
    run(dropout_workload(), steps=3, checkpoint_dir=tmp_path / "all", checkpoint_every=1, keep_last_k=None)
    assert len(list_checkpoints(tmp_path / "all")) == 3


def test_a_restart_of_the_same_run_id_resumes_without_the_flag_and_another_run_refuses(tmp_path, monkeypatch):
    from torchsmith.engine.identity import CheckpointDirError

    w = dropout_workload()
    monkeypatch.setenv("TORCHSMITH_RUN_ID", "job-a")
    run(w, steps=4, checkpoint_dir=tmp_path, checkpoint_every=2)
    again = run(w, steps=6, checkpoint_dir=tmp_path, overwrite=True)  # the same job restarted: never overwritten
    assert again.start_step == 4 and again.resumed_from == tmp_path / "step_00000004.pt"
    assert again.losses == run(w, steps=6).losses[4:]
    monkeypatch.setenv("TORCHSMITH_RUN_ID", "job-b")
    with pytest.raises(CheckpointDirError, match="job's run id job-b did not write them"):
        run(w, steps=8, checkpoint_dir=tmp_path)
    monkeypatch.setenv("TORCHSMITH_RUN_ID", "bad id!")
    with pytest.raises(ValueError, match="is not a run id"):
        run(w, steps=8, checkpoint_dir=tmp_path)


def test_a_directory_locked_by_a_live_writer_is_refused_whatever_the_flags(tmp_path):
    from torchsmith.engine.dir_lock import lock_directory
    from torchsmith.engine.identity import CheckpointDirError

    held = lock_directory(tmp_path, "other-run")  # another open file description: flock conflicts as across processes
    try:
        for flags in ({}, {"resume": True}, {"overwrite": True}):
            refused = rf"in use by another live run \(pid {os.getpid()} .*other-run"
            with pytest.raises(CheckpointDirError, match=refused):
                run(dropout_workload(), steps=2, checkpoint_dir=tmp_path, **flags)
    finally:
        held.release()
    assert run(dropout_workload(), steps=2, checkpoint_dir=tmp_path).end_step == 2  # free again


def test_sigterm_mid_run_saves_the_step_under_way_and_resume_is_bit_exact(tmp_path):
    import signal

    from torchsmith.engine.loop import RunCallbacks
    from torchsmith.engine.preemption import Preempted

    def preempt(info):
        if info.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal, handled between bytecodes

    w = dropout_workload()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as stopped:
        run(w, steps=20, checkpoint_dir=tmp_path, checkpoint_every=10, callbacks=RunCallbacks(on_step=preempt))
    assert stopped.value.exit_code == 143 and stopped.value.step == 3
    assert stopped.value.checkpoint == tmp_path / "step_00000003.pt" and list_checkpoints(tmp_path) == [
        tmp_path / "step_00000003.pt"]
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is gone with the run
    resumed = run(w, steps=20, checkpoint_dir=tmp_path, resume=True)
    reference = run(w, steps=20)
    assert stopped.value.result.losses + resumed.losses == reference.losses
    final, ref = load_checkpoint(tmp_path / "step_00000020.pt"), run(w, steps=20, checkpoint_dir=tmp_path / "r")
    ref_state = load_checkpoint(tmp_path / "r" / "step_00000020.pt")
    assert all(torch.equal(v, ref_state["model"][k]) for k, v in final["model"].items()) and ref.end_step == 20
