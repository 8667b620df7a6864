"""`torchsmith tune -- python script.py` end to end, as a user types it: plan.json, report.html,
the JSON object on stdout and the summary with the way to apply the plan and the script's side effects."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from terminal_text import unwrapped

SCRIPT = Path(__file__).parents[1] / "scripts" / "plain_loop.py"
SRC = Path(__file__).parent.parent.parent / "src"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One ``tune --json`` of the script, as a user types it, shared by the tests below: each run of the
    script is a fresh process (about 4 s of CPU on the 2-core VM, most of it importing torch), so the
    JSON object, the plan, the report and the summary on stderr come from the same tune."""
    cwd = tmp_path_factory.mktemp("tune_script_cli")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    side = cwd / "written-by-the-script.txt"
    # --pairs 3: the 3 calibration pairs asserted below; a close call stops at 3 pairs, not 8.
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "tune", "--json", "--budget", "4m", "--knobs",
                           "threads", "--window", "3", "--pairs", "3", "--out", "p.json", "--report", "r.html", "--",
                           sys.executable, str(SCRIPT), "--write", str(side)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc, cwd, side


@pytest.mark.slow
def test_tune_a_script_writes_plan_report_and_summary(tuned):
    proc, cwd, side = tuned
    assert json.loads((cwd / "p.json").read_text())["schema_version"] == 1
    out = unwrapped(proc.stderr)  # --json: the summary is on stderr; rich wraps long lines
    for needle in ("tuned plan", "top candidates", "apply it, no edit: torchsmith run --plan p.json --",
                   "side effects:", str(side), "plan written to p.json"):
        assert needle in out, needle
    page = (cwd / "r.html").read_text()
    assert "Side effects: files each run opened for writing" in page and str(side) in page
    assert "torchsmith run --plan plan.json --" in page and "Reproducibility of the baseline" in page


@pytest.mark.slow
def test_tune_json_for_a_script_is_one_object_on_stdout(tuned):
    from torchsmith.plan import Plan

    proc, _, _ = tuned
    out = json.loads(proc.stdout)  # the whole of stdout is the object
    assert set(out) >= {"plan", "as_written", "speedup", "baseline", "tuned", "candidates", "noise"}
    assert out["noise"]["pairs"] == 3 and out["as_written"] == (out["plan"] == Plan().to_dict())
    assert "runs differ by" in proc.stderr


@pytest.mark.slow
def test_run_plan_refuses_knobs_a_script_cannot_take(tmp_path):
    from torchsmith.plan import MicroBatching, Plan

    plan = Plan(microbatching=MicroBatching(count=2)).save(tmp_path / "plan.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "run", "--plan", str(plan), "--", sys.executable,
                           str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    err = unwrapped(proc.stderr)  # rich wraps at the terminal width, wherever the tmp path ends
    assert proc.returncode == 2 and "microbatching cannot be applied to a script" in err
    assert "Tip:" in err and "Traceback" not in err
