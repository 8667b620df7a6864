"""Verdicts on one knob's candidates: which passed, which won, which were close calls.

A candidate passes when it ran, kept the loss (the guard) and fits the memory limit. It wins
only when the 95% interval of its speedup over the current best clears ``1 + NOISE_MARGIN``
(``measure.intervals``, the one margin); of those that do, the fastest wins. Picking the
fastest rather than the first to clear the margin keeps the order of the candidates from
deciding. A candidate whose interval straddles the winning threshold even after the extra
rounds the budget allowed is "not distinguishable": not adopted, and said so.

The intervals come from step-by-step pairs: the plans run interleaved, so step ``i`` of the
best plan and step ``i`` of a candidate ran seconds apart and saw the same load
(``tuner.rounds``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.measure.intervals import NOISE_MARGIN, SpeedupInterval
from torchsmith.plan import Plan
from torchsmith.text import format_bytes
from torchsmith.tuner.guard import GuardConfig, guard_rejection
from torchsmith.tuner.result import Candidate, Status
from torchsmith.tuner.rounds import Round, Rounds

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


def choose(knob: str, moves: list[dict[str, Any]], measured: list[PlanMeasurement], current: PlanMeasurement,
           base: PlanMeasurement, guard: GuardConfig, memory_limit: int | None, *,
           evidence: list[Rounds | None] | None = None) -> KnobVerdict:
    """Classify each candidate of one knob, and name the winner, if any, and the close calls.

    ``evidence[i]`` holds every round candidate ``i`` was measured in (default: the one round of
    ``measured[i]`` beside ``current`` and ``base``). Close calls are passing candidates within
    ``CLOSE_CALL`` of the leader: the second look tries them again on top of the final plan,
    where the knobs chosen later may favour them.
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

    rounds = {i: _evidence(evidence, i) or Rounds([Round(baseline=base, reference=current, candidate=measured[i])])
              for i in passed}
    versus = {i: rounds[i].versus_reference() for i in passed}
    must_fit = not fits(current, memory_limit)  # the current best breaks the limit: any plan that fits is progress
    contenders = [i for i in passed if must_fit or versus[i].verdict(NOISE_MARGIN) == "faster"]
    winner_i = max(contenders, key=lambda i: versus[i].estimate) if contenders else None
    leader = versus[winner_i].estimate if winner_i is not None else 1.0
    rival = f"{describe_move(moves[winner_i])}'s" if winner_i is not None else "the current best's"
    winner, close = None, []
    for i in passed:
        m, change, iv = rounds[i].measurement(), describe_move(moves[i]), versus[i]
        speed = rounds[i].versus_baseline()
        if i == winner_i:
            winner = verdicts[i] = Candidate.from_measurement(m, base, knob, "accepted", change=change, interval=speed)
            continue
        # Against the best so far, not against the winner: a value that also won, only by less, is "beaten".
        status: Status = ("beaten" if i in contenders else "not distinguishable" if _straddles(iv) else "slower")
        verdicts[i] = Candidate.from_measurement(
            m, base, knob, status, f"{iv.estimate / leader:.2f}x {rival} speed"
            + ("" if winner_i is not None else f" ({iv.describe()} vs the current best; a win needs the "
                                               f"interval above {1 + NOISE_MARGIN:.2f}x)"), change, interval=speed)
        if iv.estimate >= leader / (1 + CLOSE_CALL):
            close.append(moves[i])
    return KnobVerdict(winner, close, [v for v in verdicts if v is not None])


def _evidence(evidence: list[Rounds | None] | None, i: int) -> Rounds | None:
    return evidence[i] if evidence is not None else None


def _straddles(iv: SpeedupInterval) -> bool:
    """Neither a win nor a loss: the interval reaches both sides of the winning threshold."""
    return iv.low <= 1 + NOISE_MARGIN < iv.high


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
