"""`RankRounds.attach`: the calibration job, measured before the pace existed, sets what a plan costs
in a job beyond its steps, so a knob's job is sized for its builds as well as its steps."""

import pytest
import torch

import torchsmith.tuner.rank_rounds as rank_rounds
from torchsmith.harness.rank_round import RankRound
from torchsmith.plan import Plan
from torchsmith.tuner.pace import ESTIMATE_SAFETY, MIN_STEPS, Pace


def _job(measure_seconds: float, error: str | None = None):
    # The job's own accounting, as rank 0 reports it; no process is started (rank_round is tested with torchrun).
    return lambda spec, plans, **kw: RankRound(measurements=[], measure_seconds=measure_seconds,
                                              wall_seconds=measure_seconds + 2.5, error=error)


def _calibrated(monkeypatch, measure_seconds: float, error: str | None = None, step_seconds: float = 0.2):
    monkeypatch.setattr(rank_rounds, "rank_round", _job(measure_seconds, error))
    ranks = rank_rounds.RankRounds("mlp", nproc=2, device=torch.device("cpu"))
    ranks.measure([Plan(), Plan()], warmup=1, steps=5, compare_steps=None, measure_memory=False)  # the A/A
    pace = Pace(budget_seconds=60.0, step_seconds=step_seconds, warmup=2, steps=5)
    ranks.attach(pace)
    return ranks, pace


def test_the_calibration_job_sets_each_plans_setup_and_later_jobs_learn_only_their_steps(monkeypatch):
    # hf-llama-like: 2 plans of 6 steps at 0.2 s took 7.0 s, so each plan cost 2.3 s beyond its steps.
    ranks, pace = _calibrated(monkeypatch, 7.0)
    assert pace.plan_setup_seconds == pytest.approx((7.0 - 12 * 0.2) / 2)
    assert pace.cost_per_plan_step() == pytest.approx(0.2)
    assert pace.estimate(12, 5) == pytest.approx(12 * (7 * 0.2 + 2.3) * ESTIMATE_SAFETY)

    # A job of 3 plans whose steps took 0.25 s each: its setup is taken out before the pace learns the step.
    monkeypatch.setattr(rank_rounds, "rank_round", _job(3 * 2.3 + 3 * (2 + MIN_STEPS) * 0.25))
    ranks.measure([Plan()] * 3, warmup=2, steps=MIN_STEPS, compare_steps=None, measure_memory=False)
    assert pace.cost_per_plan_step() == pytest.approx(0.25)
    assert pace.round_start_seconds == pytest.approx(2.5)


def test_a_tiny_step_keeps_a_small_proof_reserve(monkeypatch):
    # 2 ms steps, 0.4 s builds: the proof's many steps are cheap, its builds are not multiplied by them.
    _, pace = _calibrated(monkeypatch, 0.8, step_seconds=0.002)
    pace.steps, pace.proof_rounds = 593, 3  # what tune's pace gives such a step; the proof's 3 fresh jobs
    assert pace.plan_setup_seconds == pytest.approx((0.8 - 12 * 0.002) / 2)
    # 3 jobs of 2 plans: builds 3 x 2 x 0.39 s and steps 3 x 2 x 595 x 2 ms, with the safety margin.
    assert pace.proof_reserve() == pytest.approx(3 * 2 * (0.388 + 595 * 0.002) * ESTIMATE_SAFETY, rel=1e-3)


def test_a_failed_calibration_job_teaches_the_pace_nothing(monkeypatch):
    _, pace = _calibrated(monkeypatch, 0.0, error="timed out")
    assert pace.plan_setup_seconds == 0.0 and pace.cost_per_plan_step() == pytest.approx(0.2)
