"""verify PLAN -- cmd, decided with stub runs (seeded synthetic step times): slower only when the
whole interval is below 1.0; a plan that cannot apply to a script, or fails, is an error."""

import math
import random

import pytest

from torchsmith.plan import MicroBatching, OptimizerImpl, Plan
from torchsmith.tuner.script.run import ScriptRun
from torchsmith.tuner.script.verify import ScriptVerifyConfig, ScriptVerifyError, verify_script

FUSED = Plan(optimizer=OptimizerImpl(impl="fused"))


def _stub(monkeypatch, plan_seconds: float, noise: float = 0.03, fail: bool = False):
    rng = random.Random(0)

    def fake_run(command, plan, cfg, env=None):
        if plan != Plan() and fail:
            return ScriptRun(plan=plan, error="crashed with exit code 1 after 3 steps: RuntimeError: boom")
        base = 1.0 if plan == Plan() else plan_seconds
        return ScriptRun(plan=plan, step_seconds=base * math.exp(rng.gauss(0.0, noise)), losses=[1.0, 0.9],
                         wall_seconds=0.1, exit_code=0, steps=cfg.warmup + cfg.window)

    monkeypatch.setattr("torchsmith.tuner.script.verify.run_script", fake_run)


def test_a_plan_twice_as_slow_is_measurably_slower(monkeypatch):
    _stub(monkeypatch, 2.0)
    r = verify_script(FUSED, ["train.py"], ScriptVerifyConfig(budget_seconds=60))
    assert r.slower and r.interval.high < 1.0 and r.interval.low <= 0.5 <= r.interval.high


def test_a_faster_plan_is_not_slower(monkeypatch):
    _stub(monkeypatch, 0.8)
    r = verify_script(FUSED, ["train.py"], ScriptVerifyConfig(budget_seconds=60))
    assert not r.slower and r.interval.verdict() == "faster"


def test_an_equal_plan_is_not_called_slower(monkeypatch):
    _stub(monkeypatch, 1.0, noise=0.1)
    r = verify_script(FUSED, ["train.py"], ScriptVerifyConfig(budget_seconds=60, max_pairs=6))
    assert not r.slower and r.interval.low < 1.0 < r.interval.high


def test_a_plan_a_script_cannot_take_is_an_error():
    with pytest.raises(ScriptVerifyError, match="microbatching cannot be applied to a script"):
        verify_script(Plan(microbatching=MicroBatching(count=2)), ["train.py"])


def test_a_failing_plan_run_is_an_error(monkeypatch):
    _stub(monkeypatch, 1.0, fail=True)
    with pytest.raises(ScriptVerifyError, match="boom"):
        verify_script(FUSED, ["train.py"])
