"""The one loss comparison shared by the workload harness and the script guard: its non-finite rule."""

import math

import pytest

from torchsmith.harness.loss_guard import compare_losses
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.script.guard import baseline_spread, script_guard_rejection

NAN, INF = math.nan, math.inf


def test_finite_losses_give_the_largest_relative_difference_and_its_step():
    c = compare_losses([1.0, 2.2, 3.0], [1.0, 2.0, 3.0])
    assert c.nonfinite is None and c.nonfinite_reason() is None
    assert c.max_rel_diff == pytest.approx(0.1) and c.rel_diff == c.max_rel_diff and c.worst_step == 1
    assert c.steps == 3


def test_steps_caps_the_comparison():
    c = compare_losses([1.0, 5.0], [1.0, 1.0], steps=1)
    assert c.steps == 1 and c.max_rel_diff == 0.0


def test_a_nonfinite_candidate_against_a_finite_baseline_is_rejected():
    c = compare_losses([1.0, NAN, 1.0], [1.0, 1.0, 1.0])
    assert c.nonfinite == "candidate" and c.nonfinite_step == 1
    assert math.isnan(c.rel_diff) and c.spread == INF
    assert c.nonfinite_reason() == "loss is nan at step 2 where the baseline's is 1"


def test_a_nonfinite_baseline_against_a_finite_candidate_is_rejected():
    c = compare_losses([1.0, 1.0], [1.0, INF])
    assert c.nonfinite == "baseline" and math.isnan(c.rel_diff) and c.spread == INF
    assert "the baseline's loss is inf at step 2" in c.nonfinite_reason()


@pytest.mark.parametrize("cand, base", [(NAN, NAN), (INF, INF), (-INF, INF), (NAN, INF)])
def test_nan_against_nan_is_not_a_zero_difference(cand, base):
    c = compare_losses([1.0, cand, 1.0], [1.01, base, 1.0])
    assert c.nonfinite == "both" and c.nonfinite_step == 1
    assert math.isnan(c.rel_diff) and not c.rel_diff <= 0.02  # fails every tolerance
    assert "both losses are non-finite at step 2" in c.nonfinite_reason()
    # Two runs of the same code that diverge at the same step agree up to it.
    assert c.spread == pytest.approx(0.01 / 1.01) and c.max_rel_diff == c.spread


def test_the_script_guard_rejects_nan_against_nan():
    why, diff = script_guard_rejection([1.0, NAN], [1.0, NAN], GuardConfig())
    assert "both losses are non-finite at step 2" in why and math.isnan(diff)
    why, diff = script_guard_rejection([1.0, 1.0], [1.0, NAN], GuardConfig())
    assert "the baseline's loss is nan at step 2" in why and diff == INF


def test_the_baseline_spread_reads_a_shared_divergence_as_agreement_and_a_lone_one_as_inf():
    both = baseline_spread([1.0, 2.0, NAN], [1.0, 2.0, NAN])
    assert both.reproducible and both.max_rel_diff == 0.0 and both.steps == 3
    lone = baseline_spread([1.0, 2.0, 3.0], [1.0, 2.0, NAN])
    assert not lone.reproducible and lone.max_rel_diff == INF and lone.worst_step == 2
