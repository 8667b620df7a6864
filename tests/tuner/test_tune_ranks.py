"""`tune --nproc-per-node 2`: the strategy searched on real torchrun ranks; a killed rank fails its candidate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchsmith.distributed.strategy import INFO as PARALLEL
from torchsmith.plan import DDP, FSDP2, Plan, Zero1
from torchsmith.transforms.base import DeviceInfo
from torchsmith.tuner import TuneError
from torchsmith.tuner.search import search
from torchsmith.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
SPEC = f"{REPO / 'tests' / 'distributed' / 'dist_fault_workload.py'}:workload"


def test_the_strategy_is_searched_only_on_several_ranks_and_bf16_compression_only_on_nccl():
    assert PARALLEL.candidates(DeviceInfo(type="cpu", cores=2)) == []
    on_cpu = PARALLEL.candidates(DeviceInfo(type="cpu", cores=2, ranks=2))
    assert Zero1() in on_cpu and FSDP2() in on_cpu and DDP(comm_hook="fp16") in on_cpu
    assert DDP(comm_hook="bf16") not in on_cpu and DDP() not in on_cpu  # DDP() is the baseline there
    assert DDP(comm_hook="powersgd", powersgd_rank=4) in on_cpu
    native = DeviceInfo(type="cpu", cores=2, ranks=2, native_bf16=True)
    assert FSDP2(mixed_precision="bf16") in PARALLEL.candidates(native)
    assert FSDP2(mixed_precision="bf16") not in on_cpu  # bf16 compute only where it is native
    assert DDP(comm_hook="bf16") in PARALLEL.candidates(DeviceInfo(type="cuda", cores=2, ranks=2))
    assert PARALLEL.rank(DeviceInfo(type="cpu", ranks=2)) < PARALLEL.rank(DeviceInfo(type="cpu"))  # searched first


def test_a_workload_built_in_python_cannot_be_tuned_on_ranks():
    w = load_workload("mlp")
    w.spec = None
    with pytest.raises(TuneError, match=r"needs a workload every rank can rebuild[\s\S]*Tip: torchsmith tune"):
        search(w, budget_seconds=60, nproc=2)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tune_on_two_ranks_searches_the_strategy_and_a_killed_rank_fails_only_its_candidates(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "HOME": str(tmp_path),
           "TS_FAULT_RANK": "1", "TS_KILL_UNDER_FSDP": "1"}  # rank 1 dies in any FSDP2 step
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "tune", SPEC, "--nproc-per-node", "2", "--knobs",
                           "parallel", "--budget", "150s", "--json", "--out", str(tmp_path / "plan.json"),
                           "--report", str(tmp_path / "report.html")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["ranks"] == 2
    tried = {c["value"]: c for c in data["candidates"] if c["knob"] == "parallel"}
    assert {"parallel=zero1", "parallel=fsdp2", "parallel=ddp(bucket_cap_mb=100)"} <= set(tried), list(tried)
    for value, c in tried.items():
        if value.startswith("parallel=fsdp2"):  # the killed rank ended these candidates, not the search
            assert c["status"] == "failed" and "rank 0" in c["reason"], c
        else:  # measured on the ranks beside the baseline, each with its interval
            assert c["status"] in ("accepted", "beaten", "slower", "not distinguishable", "rejected"), c
            assert c["interval"] is None or c["interval"]["pairs"] > 0
    assert any("measured on 2 ranks" in n for n in data["notes"]), data["notes"]
    # The scale model: every strategy predicted at 2 ranks (DDP's and ZeRO-1's measured there too; FSDP2's
    # candidates failed) and at 8, 64 and 512 over the default interconnect, never measured there.
    rows = {(r["ranks"], r["strategy"]): r for r in data["scale"]}
    assert set(rows) == {(n, s) for n in (2, 8, 64, 512) for s in ("ddp", "zero1", "fsdp2")}
    assert rows[2, "ddp"]["measured_step_seconds"] > 0 and rows[2, "zero1"]["measured_peak_bytes"] > 0
    assert rows[2, "fsdp2"]["measured_step_seconds"] is None
    assert all(r["measured_step_seconds"] is None and r["predicted_step_seconds"] > 0
               for (n, _), r in rows.items() if n > 2)
    assert data["interconnect"] == "100Gbps,5us"
    Plan.load(tmp_path / "plan.json")  # the plan it hands back loads
    assert "torchsmith launch --nproc-per-node 2 -- run" in proc.stderr
