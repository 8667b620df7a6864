"""`tune --json`: one JSON object with the plan, the speedup interval, candidates and the noise."""

import json

import pytest

from torchsmith.plan import Plan
from torchsmith.report.tune_json import tune_json
from torchsmith.tuner import tune


def stub_clock(seconds_for):
    def clock(plan, run_step):
        run_step()
        return seconds_for(plan)
    return clock


def test_the_json_of_a_win_states_its_interval_and_every_candidate():
    result = tune("mlp", budget="10m", knobs=["optimizer"],
                  clock=stub_clock(lambda p: 0.5 if p.optimizer.impl == "fused" else 1.0))
    data = json.loads(json.dumps(tune_json(result), allow_nan=False))
    assert data["as_written"] is False and Plan.from_dict(data["plan"]) == result.plan
    assert data["speedup"] == {"estimate": pytest.approx(2.0), "low": pytest.approx(2.0),
                               "high": pytest.approx(2.0), "confidence": 0.95, "pairs": result.speedup_interval.pairs}
    assert data["speedup"]["pairs"] >= 6
    assert data["baseline"]["step_seconds"] == pytest.approx(1.0)
    assert data["tuned"]["step_seconds"] == pytest.approx(0.5)
    fused = next(c for c in data["candidates"] if c["value"] == "optimizer.impl=fused")
    assert fused["status"] == "accepted" and fused["ratio"] == pytest.approx(2.0)
    assert fused["interval"]["low"] == pytest.approx(2.0) and fused["interval"]["pairs"] > 0
    assert data["noise"]["spread"] == 0.0 and data["noise"]["pair_range"] == 0.0 and data["noise"]["pairs"] == 5
    assert data["pooled_noise"] is None  # the workload tuner's A/A has pairs enough: only scripts pool


def test_the_json_of_an_unchanged_workload_says_as_written_with_speedup_exactly_one():
    result = tune("mlp", budget="10m", knobs=["optimizer"], clock=stub_clock(lambda p: 1.0))
    data = tune_json(result)
    assert data["as_written"] is True and data["plan"] == Plan().to_dict()
    assert data["speedup"] == {"estimate": 1.0, "low": 1.0, "high": 1.0, "confidence": 0.95, "pairs": 0}
    assert {c["status"] for c in data["candidates"]} <= {"slower", "not distinguishable", "n/a"}


def test_the_plan_is_decided_on_the_true_ratio_and_claims_the_wider_re_measurement_interval():
    import random

    rng = random.Random(0)

    def noisy(plan, run_step):  # a 1.07x win under +-5% noise per step
        run_step()
        return (1 / 1.07 if plan.optimizer.impl == "fused" else 1.0) * (1 + rng.uniform(-0.05, 0.05))

    data = tune_json(tune("mlp", budget="10m", knobs=["optimizer"], clock=noisy))
    claim, decided = data["speedup"], data["decided_by"]
    assert data["as_written"] is False and decided["low"] > 1.03
    assert claim["low"] < decided["low"] < decided["high"] < claim["high"]  # the claim adds verify's own noise
    assert claim["estimate"] == pytest.approx(decided["estimate"])
