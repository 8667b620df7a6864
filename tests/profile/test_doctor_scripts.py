"""Real-world check: `doctor -- python script.py` on scripts with known problems, end to end.

bad_train.py has four problems; doctor must report each and nothing else. Its `.item()` per
step is a device sync only on a GPU (on a CPU nothing waits), so on a CPU three are reported.
clean_train.py is the same training with them fixed; none of the four may fire.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from child_env import default_threads_env
from torchsmith.profile.capture import CaptureConfig
from torchsmith.profile.doctor import doctor_script

SCRIPTS = Path(__file__).parents[1] / "scripts"
SRC = Path(__file__).parents[2] / "src"
FOUR = {"data-bound", "sync-in-loop", "grad-not-set-to-none", "single-tensor-optimizer"}
ON_CPU = FOUR - {"sync-in-loop"}


def _env():
    # An inherited OMP_NUM_THREADS=1 would make "CPU cores left idle" a true finding of the
    # test environment rather than of the script.
    env = default_threads_env()
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _doctor(*args):
    return subprocess.run([sys.executable, "-m", "torchsmith", "doctor", *args], capture_output=True, text=True,
                          env=_env(), timeout=300)


@pytest.mark.slow
def test_bad_script_reports_exactly_its_four_problems_and_passes_its_exit_code_through(tmp_path):
    out = _doctor("--json", "--steps", "2", "--report", str(tmp_path / "d.html"), "--trace", str(tmp_path / "t.json"),
                  "--", sys.executable, str(SCRIPTS / "bad_train.py"), "--steps", "7", "--exit-code", "3")
    assert out.returncode == 3, out.stderr[-2000:]
    assert "step 6 loss" in out.stdout and "bad_train done" in out.stdout  # the script's output passes through
    report = json.loads(out.stdout[out.stdout.index("\n{\n"):])
    assert {f["rule"] for f in report["findings"]} == ON_CPU
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert any("num_workers=0" in e for e in by_rule["data-bound"]["evidence"])
    assert "set_to_none=True" in by_rule["grad-not-set-to-none"]["fix"]
    assert "foreach=True" in by_rule["single-tensor-optimizer"]["fix"]
    assert report["breakdown_share"]["data"] > 0.10
    assert abs(sum(report["breakdown_share"].values()) - 1.0) < 1e-6
    page = (tmp_path / "d.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script src" not in page \
        and "http" not in page.split("</style>")[0]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


@pytest.mark.slow
def test_clean_script_triggers_none_of_the_four():
    report = doctor_script([sys.executable, str(SCRIPTS / "clean_train.py"), "--steps", "6"], CaptureConfig(active=2),
                           env=_env())
    assert report.exit_code == 0
    assert not FOUR & {f.rule for f in report.findings}, [f.evidence for f in report.findings]
    assert report.findings == []  # and nothing else fires on it either


@pytest.mark.slow
def test_stop_after_ends_the_script_after_the_window(tmp_path):
    report = doctor_script([sys.executable, str(SCRIPTS / "clean_train.py"), "--steps", "500"],
                           CaptureConfig(warmup=0, active=1, stop_after=True, with_stack=False), env=_env())
    assert report.facts.stopped and report.exit_code == 0
    assert report.facts.steps_seen == 3  # 1 first + 1 wait + 1 recorded, not 500


@pytest.mark.slow
def test_a_script_without_optimizer_steps_gets_a_clear_message(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text("import torch\nprint('inference only', torch.ones(2).sum().item())\nraise SystemExit(4)\n")
    out = _doctor("--", sys.executable, str(script))
    assert "inference only" in out.stdout
    assert "never called torch.optim.Optimizer.step()" in out.stderr
    assert out.returncode == 4
