"""Fault tolerance under torchrun: SIGKILL and resume, crash mid-save, restart budget, retention.

Every job trains the tiny mlp of dist_fault_workload.py for 8 steps on 2 gloo ranks, with a
DCP checkpoint every 2 steps; faults are injected through the environment.
"""

from __future__ import annotations

import json
import random

import pytest
import torch
from dist_helpers import HERE, torchrun

from torchsmith.distributed.checkpoint import load_model_tensors

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
STEPS = 8
WORKER = [str(HERE / "dist_run_worker.py")]


def job(tmp, name, env=None, max_restarts=0, extra=()):
    out, ckpt = tmp / f"{name}_out", tmp / f"{name}_ckpt"
    proc = torchrun(WORKER, ["dist_fault_workload:workload", str(out), "--steps", str(STEPS),
                             "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2", *extra],
                    env=env, max_restarts=max_restarts)
    results = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")} if out.exists() else {}
    return proc, results, ckpt


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    proc, results, ckpt = job(tmp, "ref")
    assert proc.returncode == 0, proc.stdout[-6000:]
    return results["rank0_attempt0"], ckpt


def assert_same_as_reference(reference, result, ckpt):
    ref, ref_ckpt = reference
    start = result["start_step"]
    assert result["losses"] == ref["losses"][start:]  # bit for bit: floats compared exactly
    final = load_model_tensors(ckpt / f"step_{STEPS:08d}")
    ref_final = load_model_tensors(ref_ckpt / f"step_{STEPS:08d}")
    assert final.keys() == ref_final.keys()
    for name in final:
        assert torch.equal(final[name], ref_final[name]), name


def test_retention_keeps_the_last_3_committed_steps(reference):
    _, ckpt = reference
    steps = sorted(p for p in ckpt.iterdir() if p.name != ".torchsmith.lock")  # the lock: one live job per dir
    assert [p.name for p in steps] == ["step_00000004", "step_00000006", "step_00000008"]
    assert all((p / "COMMITTED").is_file() for p in steps)


def test_sigkill_at_a_random_step_restarts_and_resumes_bit_exact(tmp_path, reference):
    kill_at = random.Random().randint(2, STEPS)
    proc, results, ckpt = job(tmp_path, "kill", env={"TS_KILL_AT_STEP": str(kill_at), "TS_FAULT_RANK": "1"},
                              max_restarts=3, extra=["--async-checkpoint"])
    assert proc.returncode == 0, f"kill at step {kill_at}:\n{proc.stdout[-6000:]}"
    assert "rank0_attempt0" not in results, "the first attempt should have died"
    resumed = results["rank0_attempt1"]
    # Async saves commit at the next save, so the resume point is the newest *committed* step.
    assert resumed["start_step"] in range(max(0, kill_at - 4), kill_at), (kill_at, resumed["start_step"])
    assert_same_as_reference(reference, resumed, ckpt)


def test_crash_mid_save_resumes_from_the_previous_complete_step(tmp_path, reference):
    proc, results, ckpt = job(tmp_path, "save", env={"TS_KILL_IN_SAVE": "4"}, max_restarts=1)
    assert proc.returncode == 0, proc.stdout[-6000:]
    resumed = results["rank0_attempt1"]
    assert resumed["start_step"] == 2 and resumed["resumed_from"].endswith("step_00000002")
    (path, why), = resumed["skipped"]
    assert path.endswith("step_00000004") and "incomplete" in why
    assert_same_as_reference(reference, resumed, ckpt)


def test_restart_budget_exhausted_names_the_rank_and_the_exception(tmp_path):
    proc, results, _ = job(tmp_path, "fail", env={"TS_FAIL_AT_STEP": "1", "TS_FAULT_RANK": "1"}, max_restarts=2)
    assert proc.returncode != 0
    assert results == {}
    out = proc.stdout
    # 1 attempt + 2 restarts, each failing the same way, then torchrun gives up.
    assert out.count("[rank1]: RuntimeError: injected failure on rank 1 at step 1") == 3, out[-4000:]
    root = out[out.index("Root Cause"):]
    assert "rank      : 1 (local_rank: 1)" in root, root
    assert "RuntimeError: injected failure on rank 1 at step 1" in root, root


def test_a_two_rank_checkpoint_loads_into_one_rank(reference, tmp_path):
    """Resharding on load: DCP lays the 2-rank model and optimizer state out for 1 rank."""
    import torch.distributed as dist
    from dist_fault_workload import workload

    from torchsmith.distributed.checkpoint import DistCheckpointer
    from torchsmith.engine.loop import build_step
    from torchsmith.plan import Plan

    _, ckpt = reference
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        step = build_step(workload(), Plan(), torch.device("cpu"))
        loaded = DistCheckpointer(ckpt).load_latest(step.parts)
    finally:
        dist.destroy_process_group()
    assert loaded.state["step"] == STEPS and loaded.state["world_size"] == 2
    final = load_model_tensors(loaded.path)
    assert all(torch.equal(v, final[k]) for k, v in step.model.state_dict().items())
    assert len(step.optimizer.state) == len(final)  # Adam moments for every parameter
