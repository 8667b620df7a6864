"""`torchsmith doctor WORKLOAD`: in-process capture of the engine, and --verify of knob-mapped fixes."""

import json

import pytest
from typer.testing import CliRunner

from torchsmith.cli import app


@pytest.mark.slow
def test_doctor_mlp_verifies_the_optimizer_fix(tmp_path):
    result = CliRunner().invoke(app, ["doctor", "mlp", "--steps", "2", "--verify", "--json",
                                      "--trace", str(tmp_path / "trace.json")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["mode"] == "workload" and report["model"] == "MLP"
    assert len(report["steps"]) == 2
    # The engine's AdamW on CPU defaults to the per-tensor loop; the trace shows it.
    rules = {f["rule"] for f in report["findings"]}
    assert "single-tensor-optimizer" in rules
    assert "sync-in-loop" not in rules and "grad-not-set-to-none" not in rules  # the engine does neither
    verified = {v["rule"]: v for v in report["verified"]}
    v = verified["single-tensor-optimizer"]
    assert v["error"] is None and v["speedup"] > 0 and v["plan"] == "optimizer.impl=foreach"
    assert v["loss_rel_diff"] < 1e-5  # same maths, same losses
    m = report["memory"]
    assert m["params"] > 0 and m["optimizer_state"] == 2 * m["params"] + 4 * 8  # AdamW: two moments + step counters
    assert "cap 20" in report["capture"]
    assert (tmp_path / "trace.json").stat().st_size > 0


def test_verify_is_refused_for_scripts():
    result = CliRunner().invoke(app, ["doctor", "--verify", "--", "python", "train.py"])
    assert result.exit_code == 2
    assert "--verify re-runs a workload" in result.output


def test_doctor_of_an_unknown_name_says_no_workload_has_it():
    # One word that is neither a workload nor a program or file is a workload name that does not
    # resolve, as for run and tune: not a script named "nope".
    result = CliRunner().invoke(app, ["doctor", "nope"])
    assert result.exit_code == 2, result.output
    error, tip = result.stderr.split("\nTip: ", 1)
    assert "Traceback" not in result.stderr and error.startswith("error: workload spec 'nope' is neither a built-in")
    assert "cannot run" not in error and "nope:workload" in tip
