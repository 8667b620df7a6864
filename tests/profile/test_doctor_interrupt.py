"""A run that ends badly still gets its report: Ctrl-C (a real SIGINT) and a crash inside the window."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent.parent / "src"
SCRIPT = """
import sys, torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
x, y = torch.randn(256, 64), torch.randn(256, 1)
crash_at = int(sys.argv[1])
step = 0
while True:  # runs until interrupted, or until it crashes at step `crash_at`
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    step += 1
    print(f"step {step}", flush=True)
    if step == crash_at:
        raise RuntimeError("boom at step %d" % step)
"""


def _start(tmp_path, crash_at: int) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": "1"}
    # Its own session, like a terminal's foreground group: Ctrl-C reaches doctor and the script.
    return subprocess.Popen([sys.executable, "-m", "torchsmith", "doctor", "--json", "--steps", "2", "--",
                             sys.executable, str(script), str(crash_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def _report(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("\n{\n"):])


@pytest.mark.slow
def test_ctrl_c_analyses_the_captured_window_then_exits_130(tmp_path):
    proc = _start(tmp_path, crash_at=0)
    lines = []
    try:
        for line in proc.stdout:  # past the window (5 steps) and the thread probe
            lines.append(line)
            if line.strip() == "step 30":
                break
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    report = _report("".join(lines) + out)
    assert report["interrupted"] and not report["partial"]
    assert "interrupted (Ctrl-C)" in report["window"]
    assert report["breakdown_share"]["forward"] > 0 and report["breakdown_share"]["backward"] > 0


@pytest.mark.slow
def test_a_crash_inside_the_window_is_reported_as_a_partial_window(tmp_path):
    proc = _start(tmp_path, crash_at=4)  # 1 first + 1 wait + 1 warm-up, then 1 of 2 recorded steps
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "boom at step 4" in err
    report = _report(out)
    assert report["crashed"] and report["partial"]
    assert "failed (exit code 1)" in report["window"] and "1 of 2 steps recorded" in report["window"]
    assert report["breakdown_share"]["data"] == 0.0  # no DataLoader: no data wait is guessed
    assert not {f["rule"] for f in report["findings"]} & {"data-bound"}
