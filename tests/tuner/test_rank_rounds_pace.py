"""`RankRounds.attach`: the calibration job, measured before the pace existed, sets what a plan-step costs."""

import pytest
import torch

import torchsmith.tuner.rank_rounds as rank_rounds
from torchsmith.harness.rank_round import RankRound
from torchsmith.plan import Plan
from torchsmith.tuner.pace import MIN_STEPS, Pace


def _job(measure_seconds: float):
    # The job's own accounting, as rank 0 reports it; no process is started (rank_round is tested with torchrun).
    return lambda spec, plans, **kw: RankRound(measurements=[], measure_seconds=measure_seconds,
                                              wall_seconds=measure_seconds + 2.5)


def test_the_calibration_jobs_cost_reaches_the_pace(monkeypatch):
    monkeypatch.setattr(rank_rounds, "rank_round", _job(7.0))
    ranks = rank_rounds.RankRounds("mlp", nproc=2, device=torch.device("cpu"))
    ranks.measure([Plan(), Plan()], warmup=1, steps=5, compare_steps=None, measure_memory=False)
    # The timed step (0.2 s) is well under what a plan-step costs in a job (builds, wrapping, warm-up).
    pace = Pace(budget_seconds=60.0, step_seconds=0.2, warmup=2, steps=5)
    ranks.attach(pace)
    assert pace.cost_per_plan_step() == pytest.approx(7.0 / (2 * (1 + 5)))
    assert ranks.unpaced == []
    assert pace.round_start_seconds == 0.0  # set by the next round, as before

    monkeypatch.setattr(rank_rounds, "rank_round", _job(12.0))
    ranks.measure([Plan()] * 3, warmup=2, steps=MIN_STEPS, compare_steps=None, measure_memory=False)
    assert pace.cost_per_plan_step() == pytest.approx((7.0 + 12.0) / (12 + 3 * (2 + MIN_STEPS)))
    assert pace.round_start_seconds == pytest.approx(2.5)


def test_a_failed_calibration_job_teaches_the_pace_nothing(monkeypatch):
    failed = lambda spec, plans, **kw: RankRound(measurements=[], measure_seconds=0.0, wall_seconds=300.0,
                                                 error="timed out")
    monkeypatch.setattr(rank_rounds, "rank_round", failed)
    ranks = rank_rounds.RankRounds("mlp", nproc=2, device=torch.device("cpu"))
    ranks.measure([Plan(), Plan()], warmup=1, steps=5, compare_steps=None, measure_memory=False)
    pace = Pace(budget_seconds=60.0, step_seconds=0.2, warmup=2, steps=5)
    ranks.attach(pace)
    assert pace.cost_per_plan_step() == pytest.approx(0.2)
