"""Verdicts on one knob's candidates: which passed, which won, which were close calls.

A candidate passes when it ran, kept the loss (the guard) and fits the memory limit. The
winner is the fastest passing candidate, and it must beat the current best by more than the
noise margin. Picking the fastest rather than the first to clear the margin keeps the order
of the candidates from deciding.

Whether a candidate is faster is read from step-by-step ratios: the plans run interleaved,
so step ``i`` of the best plan and step ``i`` of a candidate ran seconds apart and saw the
same load. :func:`unsure` finds candidates whose ratios straddle the winning threshold; the
search measures those again rather than decide on noise.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.plan import Plan
from torchsmith.text import format_bytes
from torchsmith.tuner.guard import GuardConfig, guard_rejection
from torchsmith.tuner.result import Candidate, Status

NOISE_MARGIN = 0.03
"""A candidate must beat the current best by more than 3% to replace it (shared-machine noise)."""
WIN_RATIO = 1 / (1 - NOISE_MARGIN)
"""The speed ratio over the current best that a candidate must exceed to win (~1.031)."""
CLOSE_CALL = 0.10
"""A candidate within 10% of its knob's winner gets a second try on top of the final plan."""
LARGE_WIN = 1.5
"""A win above this ratio over the current best is re-measured beside it before it is accepted:
a burst of load on the baseline's steps alone once made one thread look several times faster."""


@dataclass(frozen=True)
class KnobVerdict:
    winner: Candidate | None
    close_calls: list[dict[str, Any]]
    """Moves of passing candidates within ``CLOSE_CALL`` of the leader."""
    candidates: list[Candidate]
    """One verdict per candidate, in the order measured."""


def describe_move(move: dict[str, Any]) -> str:
    """The fields a move sets, as ``Plan.describe`` words them, e.g. 'loader.num_workers=2 + threads.intra_op=1'."""
    return Plan().replace(**move).describe()


def fits(m: PlanMeasurement, memory_limit: int | None) -> bool:
    return memory_limit is None or (m.peak_memory_bytes is not None and m.peak_memory_bytes <= memory_limit)


def failure_status(m: PlanMeasurement) -> Status:
    return "n/a" if m.refused else "failed"


def seconds(m: PlanMeasurement) -> float:
    """The step time of a measurement that ran (every plan without ``error`` has one)."""
    if m.step_seconds is None:
        raise ValueError(f"{m.plan.describe()} has no step time: {m.error or 'it was not measured'}")
    return m.step_seconds


def rejection(m: PlanMeasurement, guard: GuardConfig, memory_limit: int | None) -> str | None:
    """Why a plan that ran does not pass: the guard, then the memory limit; None when it passes."""
    reason = guard_rejection(m, guard)
    if reason is None and not fits(m, memory_limit):
        reason = (f"peak memory {format_bytes(m.peak_memory_bytes)} exceeds the limit "
                  f"{format_bytes(memory_limit)}")
    return reason


def step_ratios(reference: PlanMeasurement, m: PlanMeasurement) -> list[float]:
    """``reference``'s step time over ``m``'s, step by step: > 1 where ``m`` was faster."""
    return [a / b for a, b in zip(reference.step_times, m.step_times, strict=False) if b > 0]


def unsure(reference: PlanMeasurement, m: PlanMeasurement) -> bool:
    """True when the middle half of the step ratios straddles the winning threshold: neither
    a win nor a loss can be told from this sample. A clearly slower plan is never unsure."""
    ratios = step_ratios(reference, m)
    if len(ratios) < 4:
        return False
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return q1 < WIN_RATIO < q3


def pooled(rounds: list[tuple[PlanMeasurement, PlanMeasurement]]) -> PlanMeasurement:
    """One measurement of a candidate from several rounds, each ``(reference, candidate)``.

    Each round gives a ratio measured side by side; their median decides, expressed as a step
    time against the first round's reference. Absolute times from different rounds are never
    compared with each other.
    """
    first_ref, first = rounds[0]
    ratio = statistics.median(seconds(ref) / seconds(m) for ref, m in rounds)
    return replace(first, step_seconds=seconds(first_ref) / ratio)


def choose(knob: str, moves: list[dict[str, Any]], measured: list[PlanMeasurement], current: PlanMeasurement,
           base: PlanMeasurement, guard: GuardConfig, memory_limit: int | None) -> KnobVerdict:
    """Classify each candidate of one knob, and name the winner, if any, and the close calls.

    Close calls are passing candidates within ``CLOSE_CALL`` of the leader: the second look
    tries them again on top of the final plan, where the knobs chosen later may favour them.
    """
    verdicts: list[Candidate | None] = []
    passed: list[int] = []
    for i, (move, m) in enumerate(zip(moves, measured, strict=True)):
        change = describe_move(move)
        if m.error:
            verdicts.append(Candidate.from_measurement(m, base, knob, failure_status(m), m.error, change))
        elif reason := rejection(m, guard, memory_limit):
            verdicts.append(Candidate.from_measurement(m, base, knob, "rejected", reason, change))
        else:
            verdicts.append(None)  # passed: judged below, against the fastest
            passed.append(i)
    if not passed:
        closer = _closer_to_the_limit(moves, measured, current, base, guard, memory_limit, knob, verdicts)
        return KnobVerdict(closer, [], [v for v in verdicts if v is not None])

    fastest_i = min(passed, key=lambda i: seconds(measured[i]))
    fastest = measured[fastest_i]
    wins = seconds(fastest) < seconds(current) * (1 - NOISE_MARGIN) or not fits(current, memory_limit)
    leader = fastest if wins else current
    rival = f"{describe_move(moves[fastest_i])}'s" if wins else "the current best's"
    winner, close = None, []
    for i in passed:
        m, change = measured[i], describe_move(moves[i])
        if wins and i == fastest_i:
            winner = verdicts[i] = Candidate.from_measurement(m, base, knob, "accepted", change=change)
            continue
        verdicts[i] = Candidate.from_measurement(
            m, base, knob, "slower", f"{seconds(leader) / seconds(m):.2f}x {rival} speed"
            + ("" if wins else f" (needs > {WIN_RATIO:.2f}x to win)"), change)
        if seconds(m) <= seconds(leader) * (1 + CLOSE_CALL):
            close.append(moves[i])
    return KnobVerdict(winner, close, [v for v in verdicts if v is not None])


def _closer_to_the_limit(moves: list[dict[str, Any]], measured: list[PlanMeasurement], current: PlanMeasurement,
                         base: PlanMeasurement, guard: GuardConfig, memory_limit: int | None, knob: str,
                         verdicts: list[Candidate | None]) -> Candidate | None:
    """When nothing fits and the current plan does not fit either, the candidate with the smallest
    peak (that keeps the loss) is still progress: the next memory knob builds on it, as
    checkpointing plus micro-batching may fit where neither does alone. It replaces its verdict."""
    if memory_limit is None or fits(current, memory_limit) or current.peak_memory_bytes is None:
        return None
    kept = [i for i, m in enumerate(measured) if not m.error and guard_rejection(m, guard) is None
            and m.peak_memory_bytes is not None and m.peak_memory_bytes < current.peak_memory_bytes]
    if not kept:
        return None
    i = min(kept, key=lambda i: measured[i].peak_memory_bytes or 0)
    m = measured[i]
    closer = Candidate.from_measurement(
        m, base, knob, "accepted",
        f"closest to the limit so far: {format_bytes(m.peak_memory_bytes)} "
        f"(limit {format_bytes(memory_limit)}); the next memory knob builds on it", describe_move(moves[i]))
    verdicts[i] = closer
    return closer
