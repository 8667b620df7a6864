"""SIGTERM x checkpoint save, SIGTERM x DCP save: a real signal ends training after the step under
way, that step is saved, the exit code is the signal's (143, 138), and resuming it is bit-exact.
"""

from __future__ import annotations

import json
import re
import signal

import pytest
import torch
from fault_procs import FAULT_WORKLOAD, attempts, finish, last_result, launch, start, torchsmith, wait_for

from terminal_text import unwrapped
from torchsmith.distributed.checkpoint import list_steps, load_model_tensors
from torchsmith.engine.checkpoint import list_checkpoints, load_checkpoint

pytestmark = [pytest.mark.slow]
SAVED = re.compile(r"(SIGTERM|SIGUSR1): stopped after step (\d+) and saved (\S+); exit (\d+)")


def run_args(ckpt, steps, *extra):
    return ["run", "mlp", "--steps", steps, "--checkpoint-dir", ckpt, "--device", "cpu", "--json", *extra]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_sigterm_x_checkpoint_save_saves_the_step_under_way_and_resumes_bit_exact(tmp_path, signum):
    ckpt = tmp_path / "c"
    proc = start(run_args(ckpt, 3000, "--checkpoint-every", 20), tmp_path)
    wait_for(lambda: (ckpt / "step_00000020.pt.json").exists() or proc.poll() is not None, what="step 20")
    proc.send_signal(signum)
    code, _, err = finish(proc)
    assert code == 128 + signum, err[-3000:]
    said = unwrapped(err)
    (name, stopped, path, exit_code), = SAVED.findall(said)
    stopped = int(stopped)
    assert name == signal.Signals(signum).name and int(exit_code) == code and "Traceback" not in said
    assert stopped > 20 and stopped % 20, stopped  # more than the periodic checkpoints kept
    assert list_checkpoints(ckpt)[-1].name == f"step_{stopped:08d}.pt"
    # Resume from it, and compare with a run that was never interrupted: the same losses, the same weights.
    total = stopped + 3
    code, out, err = torchsmith(run_args(ckpt, total, "--resume"), tmp_path)
    assert code == 0, err[-3000:]
    code, ref_out, err = torchsmith(run_args(tmp_path / "ref", total), tmp_path)
    assert code == 0, err[-3000:]
    resumed, ref = json.loads(out), json.loads(ref_out)
    assert resumed["start_step"] == stopped and resumed["losses"] == ref["losses"][stopped:]
    a = load_checkpoint(ckpt / f"step_{total:08d}.pt")
    b = load_checkpoint(tmp_path / "ref" / f"step_{total:08d}.pt")
    for key in ("model", "optimizer"):
        assert _equal(a[key], b[key]), key


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_equal, a, b))
    return a == b


DCP_STEPS = 8


def dcp_job(tmp, name, steps=DCP_STEPS, *extra, max_restarts=0, **fault_env):
    ckpt, logs = tmp / f"{name}_ckpt", tmp / f"{name}_logs"
    args = [FAULT_WORKLOAD, "--steps", steps, "--checkpoint-dir", ckpt, "--checkpoint-every", 4, *extra]
    code, out, err = launch(args, tmp, max_restarts=max_restarts, log_dir=logs, **fault_env)
    return code, out + err, ckpt, logs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcp_ref")
    code, out, ckpt, logs = dcp_job(tmp, "ref", 12)
    assert code == 0, out[-6000:]
    return last_result(logs), ckpt


def assert_resumed_bit_exact(result, ckpt, reference, steps):
    ref, ref_ckpt = reference
    start_step = result["start_step"]
    assert result["losses"] == ref["losses"][start_step:steps] and result["final_loss"] == ref["losses"][steps - 1]
    final = load_model_tensors(ckpt / f"step_{steps:08d}")
    # The reference ran 12 steps; its step-`steps` directory may be pruned, so compare with a fresh
    # run only at 12, and here the losses of every step (each depends on all the weights before it).
    if steps == 12:
        ref_final = load_model_tensors(ref_ckpt / "step_00000012")
        assert all(torch.equal(final[k], ref_final[k]) for k in ref_final)


@pytest.mark.multiprocess
def test_sigterm_x_dcp_save_one_rank_signalled_every_rank_saves_the_same_step(tmp_path, reference):
    # Only rank 1 is preempted, in step 5; rank 0 never sees a signal. Both must stop after step 5
    # and save it together, exit 143; the restart torchrun makes then resumes step 5 by itself.
    code, out, ckpt, logs = dcp_job(tmp_path, "term", 12, max_restarts=1, TS_TERM_AT_STEP="5", TS_FAULT_RANK="1")
    assert code == 0, out[-6000:]
    said = unwrapped((attempts(logs, 0)[0].parent / "stderr.log").read_text())  # rank 0, first attempt
    assert SAVED.search(said) and "stopped after step 5" in said, said[-3000:]
    assert "failed (exitcode: 143)" in out, out[-3000:]  # what torchrun saw of the first attempt
    committed = [s for s, _, ok in list_steps(ckpt) if ok]
    assert 5 in committed, committed
    resumed = last_result(logs)
    assert resumed["start_step"] == 5
    assert_resumed_bit_exact(resumed, ckpt, reference, 12)


@pytest.mark.multiprocess
def test_sigterm_x_dcp_save_sigterm_to_launch_saves_and_exits_143(tmp_path, reference):
    ckpt, logs = tmp_path / "c", tmp_path / "logs"
    args = ["launch", "--nproc-per-node", "2", "--log-dir", logs, "--", "run", FAULT_WORKLOAD, "--steps", 400,
            "--checkpoint-dir", ckpt, "--checkpoint-every", 4, "--device", "cpu", "--json"]
    proc = start(args, tmp_path, TS_STEP_SLEEP="0.3")
    wait_for(lambda: (ckpt / "step_00000004" / "COMMITTED").exists() or proc.poll() is not None,
             timeout=180, what="step 4 committed")
    proc.send_signal(signal.SIGTERM)  # as Kubernetes does: to the launcher's pid only
    code, out, err = finish(proc)
    assert code == 143, (out + err)[-4000:]
    committed = [s for s, _, ok in list_steps(ckpt) if ok]
    stopped = committed[-1]
    assert 4 < stopped < 12, committed  # the step under way was saved, not only the periodic step 4
    # A fresh launch with --resume continues from it, bit-exact against the uninterrupted run.
    code, out, _, logs2 = _resume_job(tmp_path, ckpt)
    assert code == 0, out[-4000:]
    resumed = last_result(logs2)
    assert resumed["start_step"] == stopped
    assert_resumed_bit_exact(resumed, ckpt, reference, 12)


def _resume_job(tmp, ckpt):
    logs = tmp / "resume_logs"
    args = [FAULT_WORKLOAD, "--steps", 12, "--checkpoint-dir", ckpt, "--checkpoint-every", 4, "--resume"]
    code, out, err = launch(args, tmp, log_dir=logs)
    return code, out + err, ckpt, logs
