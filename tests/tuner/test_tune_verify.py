"""`torchsmith verify`: exit 0 when the plan is not slower, 1 when it is measurably slower, 2 on error."""

import functools
import importlib
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from torchsmith.cli import app
from torchsmith.plan import OptimizerImpl, Plan
from torchsmith.tuner import tune
from torchsmith.tuner.proof_rounds import EXTRA_ROUNDS
from torchsmith.tuner.verify import VerifyError, verify
from torchsmith.workload import load_workload

verify_mod = importlib.import_module("torchsmith.tuner.verify")


def stub_clock(seconds_for):
    def clock(plan, run_step):
        run_step()  # the step really runs; only its time is stubbed
        return seconds_for(plan)
    return clock


def fused_faster(plan):
    return 0.5 if plan.optimizer.impl == "fused" else 1.0


@pytest.fixture(scope="module")
def tuned_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("verify") / "plan.json"
    result = tune("mlp", budget="10m", knobs=["optimizer"], clock=stub_clock(fused_faster), out=path)
    assert result.plan.optimizer.impl == "fused"
    return path


def run_verify(monkeypatch, clock, *args):
    """The real command, in-process, with the clock stubbed inside the real verify()."""
    monkeypatch.setattr(verify_mod, "verify", functools.partial(verify, clock=clock))
    return CliRunner().invoke(app, ["verify", *args])


def test_verify_passes_the_tuned_plan(monkeypatch, tuned_plan):
    out = run_verify(monkeypatch, stub_clock(fused_faster), str(tuned_plan), "mlp", "--budget", "1m")
    assert out.exit_code == 0, out.output
    assert "2.00x (95% interval 2.00-2.00" in out.output and "faster" in out.output


def test_verify_fails_a_plan_measurably_slower(monkeypatch, tuned_plan):
    out = run_verify(monkeypatch, stub_clock(lambda p: 2.0 if p.optimizer.impl == "fused" else 1.0),
                     str(tuned_plan), "mlp", "--budget", "1m", "--json")
    assert out.exit_code == 1, out.output
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["slower"] is True and data["verdict"] == "slower"
    assert data["speedup"]["estimate"] == pytest.approx(0.5) and data["speedup"]["high"] < 1.0


def test_verify_stops_adding_rounds_once_decided_and_adds_them_while_not():
    w = load_workload("mlp")
    plan = Plan(optimizer=OptimizerImpl(impl="foreach"))
    decided = verify(w, plan, budget_seconds=600, clock=stub_clock(lambda p: 1.0))
    assert decided.rounds == 1 and decided.verdict == "not distinguishable" and not decided.slower
    # The plan's steps alternate 0.8 s and 1.25 s beside 1.0 s: the interval straddles 1.0 and
    # cannot tell, so more rounds follow, up to the cap (a stub clock measures in this process: the
    # least is one round); the plan is not called slower.
    ticks = iter(range(10**6))
    noisy = verify(w, plan, budget_seconds=600,
                   clock=stub_clock(lambda p: (0.8 if next(ticks) % 2 else 1.25) if p != Plan() else 1.0))
    assert noisy.rounds == 1 + EXTRA_ROUNDS and noisy.verdict == "not distinguishable" and not noisy.slower


def test_a_plan_that_cannot_apply_is_an_error_with_a_tip():
    from torchsmith.plan import MemoryFormat

    with pytest.raises(VerifyError, match=r"(?s)the plan of mlp could not be measured.*Tip:"):
        verify(load_workload("mlp"), Plan(memory_format=MemoryFormat(channels_last=True)), budget_seconds=30)


@pytest.mark.slow
def test_verify_exits_2_on_a_missing_plan_or_an_unknown_workload(tmp_path, tuned_plan):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "torchsmith", "verify", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    missing = run("nope.json", "mlp")
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Tip:" in missing.stderr
    assert "Traceback" not in missing.stderr
    unknown = run(str(tuned_plan), "no-such-workload")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr, unknown.stderr
    command = run(str(tuned_plan), "--", sys.executable, "train.py")
    # The command form is the script verify: a script that does not exist is an error, with a Tip.
    assert command.returncode == 2 and "Tip:" in command.stderr and "Traceback" not in command.stderr
