"""A torchrun DDP script, unmodified, under `run --plan` and `tune`: real torchrun, real gloo.

tests/scripts/ddp_loop.py (the PyTorch DDP tutorial's shape) prints, on each rank, what its own
``DistributedDataParallel`` runs with (``--observe``); the plan's DDP knobs must be there on every
rank, the script's exit code must come back through torchrun and torchsmith, and the tuner's loss
guard must compare a rank's losses with the same rank's in the other run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchsmith.plan import DDP, Plan
from torchsmith.tuner.script import ScriptTuneConfig, tune_script
from torchsmith.tuner.script.run import ScriptRunConfig, run_script

SCRIPT = Path(__file__).parents[1] / "scripts" / "ddp_loop.py"

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _torchrun(*args: str) -> list[str]:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun is installed beside the interpreter with torch"
    return [torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPT), *args]


def _torchsmith_run(plan_path: Path, command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchsmith", "run", "--plan", str(plan_path), "--", *command],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ))


def _observed(output: str) -> dict[int, dict]:
    # Found anywhere in the output: the two ranks print at the same moment, and their lines can run together.
    seen = [json.loads(m) for m in re.findall(r"DDP-OBSERVED (\{[^{}]*\})", output)]
    return {s["rank"]: s for s in seen}


def test_run_plan_puts_the_ddp_knobs_into_the_scripts_own_ddp_on_every_rank(tmp_path):
    plan = tmp_path / "plan.json"
    Plan(parallel=DDP(bucket_cap_mb=100, gradient_as_bucket_view=True, static_graph=True, comm_hook="fp16")).save(plan)
    done = _torchsmith_run(plan, _torchrun("--steps", "3", "--observe"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen = _observed(done.stdout)
    assert sorted(seen) == [0, 1], done.stdout[-2000:]
    for rank in (0, 1):
        assert seen[rank]["bucket_bytes_cap"] == 100 * 1024 * 1024
        assert seen[rank]["gradient_as_bucket_view"] is True
        assert seen[rank]["static_graph"] is True
        assert seen[rank]["comm_hook"] == "fp16_compress_hook"


def test_run_plan_passes_torchruns_exit_code_through(tmp_path):
    plan = tmp_path / "plan.json"
    Plan(parallel=DDP(static_graph=True)).save(plan)
    command = _torchrun("--steps", "2", "--exit-code", "3")  # rank 0 exits 3 at the end
    plain = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert plain.returncode != 0
    assert _torchsmith_run(plan, command).returncode == plain.returncode


def test_outcomes_name_the_override_and_refuse_bf16_on_gloo():
    # The script passes bucket_cap_mb=50 itself and registers no hook: the plan's 100 wins, and
    # bf16 compression (NCCL only) is refused on gloo, each as a typed outcome.
    plan = Plan(parallel=DDP(bucket_cap_mb=100, comm_hook="bf16"))
    r = run_script(_torchrun("--steps", "12", "--bucket-cap-mb", "50"), plan,
                   ScriptRunConfig(warmup=2, window=3, timeout_s=120, short_ok=True))
    assert r.ok, r.error
    bucket, hook = r.applied["ddp.bucket_cap_mb"], r.applied["ddp.comm_hook"]
    assert bucket.status == "applied" and "the script passed bucket_cap_mb=50" in bucket.detail
    assert hook.status == "refused" and "NCCL" in hook.detail
    assert r.facts["ddp"][0]["bucket_bytes_cap"] == 100 * 1024 * 1024


def test_the_aa_guard_compares_rank_with_rank(tmp_path):
    # Each rank trains on its own data, so rank 0's and rank 1's losses differ; each is the same
    # from run to run. The script delays rank (run number % 2) before its first step, so the rank
    # that steps first alternates: a guard that took whichever rank stepped first would compare
    # rank 0's losses with rank 1's and widen itself. One A/A pair is the two orders, side by side.
    counter = tmp_path / "runs"
    result = tune_script(_torchrun("--steps", "12", "--alternate-slow-rank", str(counter)), ScriptTuneConfig(
        budget_seconds=600, knobs=(), run=ScriptRunConfig(warmup=2, window=3, timeout_s=120),
        calibration_pairs=1, min_pairs=2, max_pairs=2, proof_max_pairs=2, min_window_seconds=0.0))
    assert int(counter.read_text()) >= 2  # both orders ran: each rank was the first to step in one run
    assert result.spread is not None and result.spread.max_rel_diff == 0.0, result.notes
    assert result.guard.loss_rtol == ScriptTuneConfig().guard.loss_rtol  # not widened
