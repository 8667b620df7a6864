"""The pair scheduler of the script tuner, with stub runs (seeded synthetic step times, no clocks):
the B A A B order (the candidate first), early stops on clear calls, the cap on close calls,
failures and the budget."""

import math
import random

from torchsmith.measure.intervals import AdaptivePairs
from torchsmith.plan import OptimizerImpl, Plan
from torchsmith.tuner.script.pairs import compare_in_pairs
from torchsmith.tuner.script.run import ScriptRun

FUSED = Plan(optimizer=OptimizerImpl(impl="fused"))


def _runner(speedup: float, noise: float = 0.05, seed: int = 0, fail_at: int | None = None):
    """Runs of 1 s (as written) or 1/speedup s (the candidate), times seeded lognormal noise."""
    rng = random.Random(seed)
    order: list[str] = []

    def run(plan: Plan, label: str) -> ScriptRun:
        who = "B" if plan == FUSED else "A"
        order.append(who)
        if who == "B" and fail_at is not None and order.count("B") == fail_at:
            return ScriptRun(plan=plan, error="crashed with exit code 1 after 4 steps: RuntimeError: boom")
        base = 1.0 if who == "A" else 1.0 / speedup
        return ScriptRun(plan=plan, step_seconds=base * math.exp(rng.gauss(0.0, noise)), losses=[1.0])

    return run, order


def test_pairs_alternate_order_b_a_a_b_candidate_first():
    run, order = _runner(1.0)
    compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=4, max_pairs=4), afford_pair=lambda: True)
    assert "".join(order) == "BAABBAAB"
    run, order = _runner(1.0)
    compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=2, max_pairs=2), afford_pair=lambda: True,
                     first_order=0)
    assert "".join(order) == "ABBA"


def test_a_clear_win_stops_early_and_is_faster():
    run, _ = _runner(2.0, noise=0.15)
    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=3, max_pairs=12), afford_pair=lambda: True)
    iv = out.interval()
    assert iv.verdict() == "faster" and out.pairs < 12
    assert iv.low <= 2.0 <= iv.high


def test_a_close_call_goes_to_the_cap_and_is_not_distinguishable():
    # 1.04x at 10% noise: the interval straddles 1.03 (the margin) pair after pair.
    run, _ = _runner(1.04, noise=0.10, seed=1)
    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=3, max_pairs=10), afford_pair=lambda: True)
    iv = out.interval()
    assert out.pairs == 10 and iv.verdict() == "not distinguishable" and iv.low < 1.03 < iv.high


def test_a_failing_candidate_ends_the_comparison_at_once():
    run, order = _runner(1.5, fail_at=2)
    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=3, max_pairs=8), afford_pair=lambda: True)
    assert out.stopped_by is not None and "boom" in out.stopped_by.error
    assert out.pairs == 1 and "".join(order) == "BAAB"  # the second pair's B ran last and failed


def test_a_rejected_run_stops_without_more_pairs():
    run, order = _runner(1.5)
    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(), afford_pair=lambda: True,
                           stop=lambda r: True)
    assert out.stopped_by is not None and out.pairs == 0 and "".join(order) == "B"  # no reference run wasted


def test_the_budget_stops_the_pairs_and_says_so():
    run, _ = _runner(1.02, noise=0.1)
    left = iter([True, True, False])
    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=3, max_pairs=8),
                           afford_pair=lambda: next(left))
    assert out.out_of_budget and out.pairs == 2


def test_a_failed_reference_run_drops_its_pair():
    rng = random.Random(0)
    calls = {"A": 0}

    def run(plan: Plan, label: str) -> ScriptRun:
        if plan == Plan():
            calls["A"] += 1
            if calls["A"] == 2:
                return ScriptRun(plan=plan, error="hung: still running after its time limit")
        return ScriptRun(plan=plan, step_seconds=math.exp(rng.gauss(0.0, 0.01)), losses=[1.0])

    out = compare_in_pairs(run, Plan(), FUSED, AdaptivePairs(min_pairs=3, max_pairs=3), afford_pair=lambda: True)
    assert out.pairs == 3 and out.reference_failures == 1 and calls["A"] == 4
