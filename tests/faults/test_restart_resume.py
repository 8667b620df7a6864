"""restart x resume refusal: a torchrun restart resumes its own run with no flag; another run still refuses.

Real ``torchsmith launch`` jobs (torchrun, 2 gloo ranks) of the tiny mlp in
tests/distributed/dist_fault_workload.py, 8 steps, a DCP checkpoint every 4; rank 1 SIGKILLs
itself in step 5, after the step-4 checkpoint, on the first attempt only.
"""

from __future__ import annotations

import pytest
import torch
from fault_procs import FAULT_WORKLOAD, attempts, last_result, launch

from terminal_text import unwrapped
from torchsmith.distributed.checkpoint import load_model_tensors
from torchsmith.engine.dir_lock import LOCK_NAME
from torchsmith.plan import FSDP2, Plan

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
STEPS, EVERY, KILL_AT = 8, 4, 5
PLANS = {"ddp": None, "fsdp2": Plan(parallel=FSDP2())}  # ddp: the default plan under torchrun


def job(tmp, name, plan, max_restarts=0, extra=(), **fault_env):
    ckpt, logs = tmp / f"{name}_ckpt", tmp / f"{name}_logs"
    args = [FAULT_WORKLOAD, "--steps", STEPS, "--checkpoint-dir", ckpt, "--checkpoint-every", EVERY, *extra]
    if PLANS[plan] is not None:
        PLANS[plan].save(tmp / f"{plan}.json")
        args += ["--plan", tmp / f"{plan}.json"]
    code, out, err = launch(args, tmp, max_restarts=max_restarts, log_dir=logs, **fault_env)
    return code, out + err, ckpt, logs


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    done = {}

    def get(plan):
        if plan not in done:
            tmp = tmp_path_factory.mktemp(f"ref_{plan}")
            code, out, ckpt, logs = job(tmp, "ref", plan)
            assert code == 0, out[-6000:]
            done[plan] = (last_result(logs), ckpt)
        return done[plan]

    return get


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_restart_x_resume_refusal_a_killed_worker_resumes_its_own_run_bit_exact(tmp_path, uninterrupted, plan):
    ref, ref_ckpt = uninterrupted(plan)
    code, out, ckpt, logs = job(tmp_path, "kill", plan, max_restarts=2,
                                TS_KILL_AT_STEP=str(KILL_AT), TS_FAULT_RANK="1")
    assert code == 0, out[-6000:]
    assert sorted(attempts(logs)) == [0, 1], out[-3000:]  # one restart, and no flag told it to resume
    resumed = last_result(logs)
    assert resumed["start_step"] == EVERY, resumed["start_step"]
    assert resumed["losses"] == ref["losses"][EVERY:]  # floats compared exactly
    assert resumed["final_loss"] == ref["final_loss"]
    final, ref_final = (load_model_tensors(d / f"step_{STEPS:08d}") for d in (ckpt, ref_ckpt))
    assert final.keys() == ref_final.keys()
    for name in final:
        assert torch.equal(final[name], ref_final[name]), name


def test_restart_x_resume_refusal_another_run_still_refuses_on_every_attempt(tmp_path, uninterrupted):
    _, ref_ckpt = uninterrupted("ddp")
    before = checkpoint_files(ref_ckpt)
    # A second, different job (its own run id) into the first one's directory, with restarts left.
    args = [FAULT_WORKLOAD, "--steps", STEPS, "--checkpoint-dir", ref_ckpt, "--checkpoint-every", EVERY]
    code, out, err = launch(args, tmp_path, max_restarts=1, log_dir=tmp_path / "intruder_logs")
    assert code != 0
    runs = attempts(tmp_path / "intruder_logs")
    assert sorted(runs) == [0, 1], out + err
    for attempt in runs.values():
        said = unwrapped((attempt.parent / "stderr.log").read_text())
        assert "already holds 2 checkpoint(s)" in said and "did not write them" in said, said[-2000:]
        assert "Traceback" not in said, said[-2000:]
    assert checkpoint_files(ref_ckpt) == before  # nothing written, nothing deleted


def checkpoint_files(root):
    """Every file's bytes, but the lock's (its text names the last holder)."""
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != LOCK_NAME}
