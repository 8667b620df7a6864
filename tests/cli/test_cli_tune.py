"""`torchsmith tune` end to end, in a subprocess, as a user types it."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_tune_writes_plan_and_report_and_prints_the_summary(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "tune", "mlp", "--budget", "40s",
                           "--knobs", "threads,optimizer", "--out", "p.json", "--report", "r.html"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "p.json").read_text())["schema_version"] == 1
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    for needle in ("tuned plan", "speedup vs as written", "top candidates", "plan written to p.json"):
        assert needle in proc.stdout


@pytest.mark.slow
def test_tune_bad_input_is_one_clear_error(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "torchsmith", "tune", *a], capture_output=True,
                                    text=True, cwd=tmp_path, timeout=300)
    for args, message in ((["mlp", "--memory-limit", "lots"], "cannot read the memory limit 'lots'"),
                          (["mlp", "--budget", "soon"], "cannot read the time budget 'soon'"),
                          (["mlp", "--knobs", "warp"], "unknown or inapplicable knob")):
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
