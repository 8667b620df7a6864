"""Repeatable decisions on noisy machines: undecided candidates get more rounds, large wins a re-check."""

import pytest

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.plan import Plan, Threads
from torchsmith.tuner import tune
from torchsmith.tuner.rounds import Round, Rounds


def counting_clock(seconds_for):
    """A stub clock whose time for a plan may depend on how often that plan already ran."""
    calls: dict[Plan, int] = {}

    def clock(plan, run_step):
        run_step()
        calls[plan] = calls.get(plan, 0) + 1
        return seconds_for(plan, calls[plan])
    clock.calls = calls
    return clock


@pytest.mark.slow
def test_a_large_win_seen_in_one_burst_is_rechecked_and_dropped():
    # As when another process loaded the machine during the baseline's steps only: the first round
    # shows the candidate 4x faster, every later round shows it as fast as the baseline.
    def seconds(plan, n):
        if plan.optimizer.impl == "fused":
            return 0.25 if n <= 14 else 1.0
        return 1.0

    clock = counting_clock(seconds)
    result = tune("mlp", budget="30m", knobs=["optimizer"], clock=clock)
    assert result.plan.optimizer.impl != "fused"
    fused = next(c for c in result.candidates if c.change == "optimizer.impl=fused")
    assert fused.status == "slower" and fused.speedup == pytest.approx(1.0)  # median of 3 rounds


@pytest.mark.slow
def test_a_genuine_large_win_survives_its_recheck():
    clock = counting_clock(lambda plan, n: 0.4 if plan.optimizer.impl == "fused" else 1.0)
    result = tune("mlp", budget="30m", knobs=["optimizer"], clock=clock)
    assert result.plan.optimizer.impl == "fused" and result.speedup == pytest.approx(2.5)


def measurement(times):
    return PlanMeasurement(Plan(), sum(times) / len(times), step_times=list(times))


def test_an_undecided_candidate_needs_more_rounds_a_clear_one_does_not():
    ref = measurement([1.0] * 8)
    straddling = Rounds([Round(baseline=ref, reference=ref, candidate=measurement([0.9, 1.05] * 4))])
    assert straddling.versus_reference().low < 1.03 < straddling.versus_reference().high
    assert straddling.adaptive(max_rounds=3).need_more()
    clear = Rounds([Round(baseline=ref, reference=ref, candidate=measurement([0.5, 0.55] * 4))])
    assert clear.versus_reference().verdict() == "faster" and not clear.adaptive(max_rounds=3).need_more()
    slower = Rounds([Round(baseline=ref, reference=ref, candidate=measurement([2.0, 2.2] * 4))])
    assert not slower.adaptive(max_rounds=3).need_more()  # clearly slower: no more rounds


def test_rounds_pool_their_pairs_and_drop_one_burst():
    ref = measurement([1.0] * 4)
    burst = Round(baseline=ref, reference=ref, candidate=measurement([0.25] * 4))
    calm = [Round(baseline=ref, reference=ref, candidate=measurement(t)) for t in ([1.0, 0.98] * 2, [0.99, 1.0] * 2)]
    two = Rounds([burst, calm[0]])
    assert two.kept() == two.rounds  # two rounds: neither can be told the odd one out
    assert two.versus_reference().pairs == 8
    three = Rounds([burst, *calm])
    assert three.kept() == calm
    assert three.versus_reference().estimate == pytest.approx(1.0, abs=0.02)
    assert three.measurement().step_seconds == pytest.approx(1.0 / three.versus_baseline().estimate)


def test_when_nothing_fits_the_smallest_peak_that_keeps_the_loss_is_kept_for_the_next_memory_knob():
    from torchsmith.tuner.choose import choose
    from torchsmith.tuner.guard import GuardConfig

    def m(peak, loss_diff=0.0):
        return PlanMeasurement(Plan(), 1.0, step_times=[1.0] * 4, peak_memory_bytes=peak, losses=[1.0],
                               loss_rel_diff=loss_diff, param_rel_diff=0.0)

    current = m(250)
    moves = [{"threads": Threads(intra_op=n)} for n in (1, 2, 3)]  # any distinct moves: only the peaks matter
    measured = [m(180), m(120, loss_diff=0.5), m(220)]  # the one under the limit changes the loss
    verdict = choose("checkpointing", moves, measured, current, current, GuardConfig(), memory_limit=150)
    assert verdict.winner is not None and verdict.winner.peak_memory_bytes == 180
    assert "closest to the limit" in verdict.winner.reason
    assert choose("checkpointing", moves, measured, m(140), m(140), GuardConfig(), memory_limit=150).winner is None


def test_an_interim_look_reads_a_stricter_interval_that_contains_the_final_one():
    ref = measurement([1.0] * 8)
    rounds = Rounds([Round(baseline=ref, reference=ref, candidate=measurement([0.9 + 0.03 * i, 1.1 - 0.02 * i] * 4))
                     for i in range(4)])
    final, interim = rounds.versus_reference(), rounds.versus_reference(confidence=0.99)
    assert interim.confidence == 0.99 and final.confidence == 0.95
    assert interim.low < final.low < final.estimate < final.high < interim.high
