"""How many pairs the script tuner's final proof is sure to get (``proof_pairs``), on synthetic
samples: sized by the noise seen and the walk's win, between ``min_pairs`` and ``max_pairs``."""

import math
import random

import pytest

from torchsmith.measure.intervals import NOISE_MARGIN, NoiseCalibration, speedup_interval
from torchsmith.tuner.script.search import proof_pairs

QUIET = NoiseCalibration(spread=0.02, pairs=3)


def test_a_clear_win_on_a_quiet_machine_needs_only_the_minimum():
    won = speedup_interval([1.0, 1.01, 0.99, 1.0], [0.50, 0.51, 0.49, 0.50])  # 2.0x, +-2%
    assert proof_pairs(QUIET, [won], 3, 8) == 3


def test_a_win_barely_accepted_gets_the_cap():
    won = speedup_interval([1.0, 1.3, 0.9, 1.2], [0.6, 0.9, 0.7, 0.6])  # 1.58x, low end 1.16
    assert won.low > 1 + NOISE_MARGIN
    assert proof_pairs(QUIET, [won], 3, 8) == 8


def test_a_noisy_calibration_asks_for_more_pairs_than_a_quiet_one():
    won = speedup_interval([1.0, 1.01, 0.99, 1.0], [0.70, 0.72, 0.69, 0.71])  # 1.42x, narrow
    quiet = proof_pairs(QUIET, [won], 3, 8)
    noisy = proof_pairs(NoiseCalibration(spread=0.83, pairs=3), [won], 3, 8)
    assert quiet == 3 and 3 < noisy <= 8


def test_chained_wins_are_judged_by_their_product():
    a = speedup_interval([1.0, 1.01, 0.99, 1.0], [0.95, 0.96, 0.94, 0.95])  # ~1.05x each: 1.10x chained
    alone = proof_pairs(NoiseCalibration(spread=0.10, pairs=3), [a], 3, 30)
    chained = proof_pairs(NoiseCalibration(spread=0.10, pairs=3), [a, a], 3, 30)
    assert chained < alone


def test_unknown_noise_or_no_win_to_confirm():
    one_pair = speedup_interval([1.0], [0.5])  # a memory-limit plan kept after one pair: noise unknown
    assert proof_pairs(QUIET, [one_pair], 3, 8) == 8
    assert proof_pairs(QUIET, [], 3, 8) == 3


def _process_time(rng: random.Random, base: float) -> float:
    """A process's step time on the noisy VM: +-10% jitter, and 1 in 3 processes 40% slower
    (a stalled second thread), the bimodal noise that broke the 3-pair proof."""
    return base * math.exp(rng.gauss(0, 0.10)) * (1.4 if rng.random() < 1 / 3 else 1.0)


def _pairs(rng: random.Random, n: int, speedup: float) -> tuple[list[float], list[float]]:
    base = [_process_time(rng, 1.0) for _ in range(n)]
    cand = [_process_time(rng, 1.0 / speedup) for _ in range(n)]
    return base, cand


def test_a_sized_proof_confirms_a_true_win_more_often_than_three_pairs():
    """A true 1.6x under bimodal process noise, accepted by the walk after 4 pairs: the proof with
    ``proof_pairs`` pairs confirms it (95% low end above the margin) in >= 90% of 300 seeded runs,
    and more often than a proof of 3 pairs."""
    rng = random.Random(0)
    sized = three = trials = 0
    for _ in range(300):
        calibration = NoiseCalibration(spread=speedup_interval(*_pairs(rng, 3, 1.0)).half_width, pairs=3)
        won = speedup_interval(*_pairs(rng, 4, 1.6))
        if won.low <= 1 + NOISE_MARGIN:
            continue  # the walk did not accept it: no proof runs
        trials += 1
        n = proof_pairs(calibration, [won], 3, 8)
        proof_b, proof_c = _pairs(rng, 8, 1.6)
        sized += speedup_interval(proof_b[:n], proof_c[:n]).low > 1 + NOISE_MARGIN
        three += speedup_interval(proof_b[:3], proof_c[:3]).low > 1 + NOISE_MARGIN
    assert trials > 100
    assert sized >= 0.9 * trials
    assert sized > three


def _clocked_runs(monkeypatch, speedup: float, noise: float, seed: int) -> None:
    """run_script replaced by seeded lognormal step times (the candidate ``speedup``x faster), each run
    taking exactly one second of a fake clock, so the budget binds as the search predicted it would."""
    from types import SimpleNamespace

    from torchsmith.inject.outcome import KnobOutcome
    from torchsmith.tuner.script.run import ScriptRun

    rng, now = random.Random(seed), [0.0]

    def fake_run(command, plan, cfg, env=None):
        now[0] += 1.0
        fast = plan.optimizer.impl != "as_written"
        applied = {"optimizer": KnobOutcome(knob="optimizer", status="applied", detail="AdamW(...)")} if fast else {}
        return ScriptRun(plan=plan, step_seconds=math.exp(rng.gauss(0, noise)) / (speedup if fast else 1.0),
                         losses=[1.0, 0.9], applied=applied, wall_seconds=1.0, exit_code=0, facts={"device": "cpu"},
                         steps=cfg.warmup + cfg.window)

    monkeypatch.setattr("torchsmith.tuner.script.search.run_script", fake_run)
    monkeypatch.setattr("torchsmith.tuner.script.search.time", SimpleNamespace(perf_counter=lambda: now[0]))


def test_a_late_win_overruns_the_budget_by_at_most_the_minimum_proof(monkeypatch):
    """A win accepted as the budget ends raises the proof's reserve after the walk kept it: the proof
    then runs min_pairs pairs (never its sized count of up to proof_max_pairs), so no tune overruns
    its budget by more than those pairs, whatever the noise; a quiet one ends within it."""
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script

    overruns = []
    for seed in range(12):
        _clocked_runs(monkeypatch, speedup=1.3, noise=0.2, seed=seed)
        cfg = ScriptTuneConfig(budget_seconds=40, knobs=("optimizer",), min_window_seconds=0.0)
        r = tune_script(["train.py"], cfg)
        overruns.append(r.elapsed_seconds - cfg.budget_seconds)
        if r.decided_by is not None:
            assert r.decided_by.pairs >= cfg.min_pairs
    assert max(overruns) <= 2 * ScriptTuneConfig.min_pairs, overruns  # a pair is two 1-second runs


def test_a_config_whose_pairs_cannot_decide_is_refused_with_a_tip():
    from torchsmith.tuner.script import ScriptTuneConfig

    with pytest.raises(ValueError, match=r"min_pairs <= max_pairs and proof_max_pairs[\s\S]*Tip: --pairs N"):
        ScriptTuneConfig(min_pairs=3, proof_max_pairs=2)


def test_the_proof_is_decided_on_an_interval_floored_by_the_tunes_own_noise(monkeypatch):
    """The proof's interval is pooled with the A/A run's and every candidate's noise
    (``intervals.noise_floored``), and that floored interval is what decides and is claimed."""
    from torchsmith.measure import intervals
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script

    seen = []

    def spy(iv, noise):
        seen.append((iv, list(noise), intervals.noise_floored(iv, noise)))
        return seen[-1][2]

    monkeypatch.setattr("torchsmith.tuner.script.search.noise_floored", spy)
    _clocked_runs(monkeypatch, speedup=1.6, noise=0.05, seed=0)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",), min_window_seconds=0.0))
    assert len(seen) == 1 and r.decided_by is seen[0][2]
    raw, noise, floored = seen[0]
    assert noise[0] == (r.noise.per_pair_spread(), r.noise.pairs)  # the A/A run first, then the candidates
    assert len(noise) == 1 + sum(c.interval is not None for c in r.candidates if c.knob != "best")
    assert floored.low <= raw.low and floored.high >= raw.high
    # The noise the result states at the end pools the same experiments and the proof's own pairs.
    from torchsmith.measure.intervals import NoiseCalibration, implied_log_sd
    assert r.pooled_noise == NoiseCalibration.pooled([*noise, (implied_log_sd(raw), raw.pairs)])
    assert r.pooled_noise.pairs > r.noise.pairs
