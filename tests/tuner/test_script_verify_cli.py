"""`torchsmith verify PLAN -- python script.py` and `tune --json -- python script.py`, as a user types
them: exit codes, one JSON object on stdout, messages on stderr."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchsmith.plan import OptimizerImpl, Plan

SCRIPT = Path(__file__).parents[1] / "scripts" / "plain_loop.py"
SRC = Path(__file__).parent.parent.parent / "src"


def _torchsmith(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "torchsmith", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=1200)


@pytest.mark.slow
def test_verify_a_script_prints_its_interval_as_json_and_exits_0_or_1(tmp_path):
    plan = Plan(optimizer=OptimizerImpl(impl="foreach")).save(tmp_path / "plan.json")
    # --pairs 3: exactly the 3 pairs asserted below, not up to 12 while the budget lasts.
    proc = _torchsmith("verify", str(plan), "--json", "--budget", "30s", "--window", "3", "--pairs", "3", "--",
                       sys.executable, str(SCRIPT),
                       cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout holds the JSON object alone
    assert out["speedup"]["pairs"] >= 3 and out["speedup"]["confidence"] == 0.95
    assert out["slower"] == (proc.returncode == 1) and out["slower"] == (out["speedup"]["high"] < 1.0)
    assert "pairs of fresh processes" in proc.stderr


@pytest.mark.slow
def test_tune_json_for_a_script_is_one_object_on_stdout(tmp_path):
    # --pairs 3: the 3 calibration pairs asserted below; a close call stops at 3 pairs, not 8.
    proc = _torchsmith("tune", "--json", "--budget", "20s", "--knobs", "threads", "--window", "3", "--pairs", "3",
                       "--report", "",
                       "--", sys.executable,
                       str(SCRIPT), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert set(out) >= {"plan", "as_written", "speedup", "baseline", "tuned", "candidates", "noise"}
    assert out["noise"]["pairs"] == 3 and out["as_written"] == (out["plan"] == Plan().to_dict())
    assert "runs differ by" in proc.stderr
