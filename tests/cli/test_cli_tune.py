"""`torchsmith tune` end to end, in a subprocess, as a user types it."""

import json
import subprocess
import sys

import pytest

from terminal_text import unwrapped


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One ``tune mlp --json`` as a user types it, shared by the tests below: a 40 s budget is spent
    whatever it finds, so the files, the JSON object and the summary on stderr come from one tune."""
    cwd = tmp_path_factory.mktemp("cli_tune")
    proc = subprocess.run([sys.executable, "-m", "torchsmith", "tune", "mlp", "--budget", "40s", "--json",
                           "--knobs", "threads,optimizer", "--out", "p.json", "--report", "r.html"],
                          capture_output=True, text=True, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, cwd


@pytest.mark.slow
def test_tune_writes_plan_and_report_and_prints_the_summary(tuned):
    proc, cwd = tuned
    assert json.loads((cwd / "p.json").read_text())["schema_version"] == 1
    assert (cwd / "r.html").read_text().startswith("<!doctype html>")
    out = unwrapped(proc.stderr)  # --json: the summary is on stderr; rich wraps long lines
    for needle in ("tuned plan", "speedup vs as written", "top candidates", "plan written to p.json"):
        assert needle in out, needle


@pytest.mark.slow
def test_tune_json_prints_one_object_on_stdout_and_the_tables_on_stderr(tuned):
    proc, _ = tuned
    data = json.loads(proc.stdout)  # the whole of stdout is the object
    assert set(data) >= {"plan", "as_written", "speedup", "baseline", "tuned", "candidates", "noise"}
    assert set(data["speedup"]) == {"estimate", "low", "high", "confidence", "pairs"}
    assert data["speedup"]["confidence"] == 0.95
    assert all(set(c) >= {"knob", "value", "status", "ratio", "interval"} for c in data["candidates"])
    assert data["noise"]["pairs"] == 5 and "tuned plan" in proc.stderr and "speedup vs as written" in proc.stderr


@pytest.mark.slow
def test_tune_bad_input_is_one_clear_error(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "torchsmith", "tune", *a], capture_output=True,
                                    text=True, cwd=tmp_path, timeout=300)
    for args, message in ((["mlp", "--memory-limit", "lots"], "cannot read the memory limit 'lots'"),
                          (["mlp", "--budget", "soon"], "cannot read the time budget 'soon'"),
                          (["mlp", "--knobs", "warp"], "unknown or inapplicable knob")):
        proc = run(*args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
