"""`torchsmith tune -- python script.py` end to end, as a user types it: plan.json, report.html and
the terminal summary with the way to apply the plan and the script's side effects."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "plain_loop.py"
SRC = Path(__file__).parent.parent.parent / "src"


@pytest.mark.slow
def test_tune_a_script_writes_plan_report_and_summary(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    side = tmp_path / "written-by-the-script.txt"
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "tune", "--budget", "4m", "--knobs", "threads",
                           "--window", "3", "--pairs", "2", "--out", "p.json", "--report", "r.html", "--",
                           sys.executable, str(SCRIPT), "--write", str(side)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert json.loads((tmp_path / "p.json").read_text())["schema_version"] == 1
    out = " ".join(proc.stdout.split())  # rich wraps long lines
    for needle in ("tuned plan", "top candidates", "apply it, no edit: torchsmith run --plan p.json --",
                   "side effects:", str(side), "plan written to p.json"):
        assert needle in out, needle
    page = (tmp_path / "r.html").read_text()
    assert "Side effects: files each run opened for writing" in page and str(side) in page
    assert "torchsmith run --plan plan.json --" in page and "Reproducibility of the baseline" in page


@pytest.mark.slow
def test_run_plan_refuses_knobs_a_script_cannot_take(tmp_path):
    from torchsmith.plan import MicroBatching, Plan

    plan = Plan(microbatching=MicroBatching(count=2)).save(tmp_path / "plan.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "run", "--plan", str(plan), "--", sys.executable,
                           str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    err = " ".join(proc.stderr.split())  # rich wraps at the terminal width, wherever the tmp path ends
    assert proc.returncode == 2 and "microbatching cannot be applied to a script" in err
    assert "Tip:" in err and "Traceback" not in err
