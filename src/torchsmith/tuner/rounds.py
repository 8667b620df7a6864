"""A candidate's evidence: every round it was measured in, beside the baseline and the best so far.

One round is one ``measure_plans`` call: the candidate, the plan it must beat (the best so far,
which is the baseline at first) and the as-written baseline, interleaved step by step. Its step
times pair up (``harness.compare.paired_seconds``), and the pairs of all rounds pool into one
interval (``measure.intervals``), which narrows as a close call gets more rounds.

A round can be one burst: another process loading the machine during one plan's steps only
once made one thread look 4.4x faster for a whole round. With three rounds or more, a round
whose own ratio lies outside the interval the other rounds give together is such a burst, and
the most extreme one is dropped (with two rounds neither can be told the odd one out).

Example::

    ev = Rounds([Round(baseline=ms[0], reference=ms[0], candidate=ms[2])])
    ev.versus_reference().verdict()   # 'faster', 'slower' or 'not distinguishable'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from torchsmith.harness.compare import PlanMeasurement, paired_seconds
from torchsmith.measure.intervals import (
    NOISE_MARGIN,
    AdaptivePairs,
    Goal,
    SpeedupInterval,
    remeasurement_interval,
    speedup_interval,
)


@dataclass(frozen=True, kw_only=True)
class Round:
    baseline: PlanMeasurement
    """The as-written plan, measured in this round."""
    reference: PlanMeasurement
    """The plan the candidate must beat, measured in this round (the baseline itself at first)."""
    candidate: PlanMeasurement


@dataclass
class Rounds:
    rounds: list[Round] = field(default_factory=list)

    def add(self, r: Round) -> None:
        self.rounds.append(r)

    def kept(self) -> list[Round]:
        """The rounds the intervals use: all, less the most extreme burst once there are three or more.
        A burst lies outside the other rounds' interval by more than the noise margin: a round merely
        a little off a tight interval is noise, and stays."""
        if len(self.rounds) < BETWEEN_ROUNDS_FROM:
            return self.rounds
        worst, worst_at = math.log1p(NOISE_MARGIN), None
        for j, r in enumerate(self.rounds):
            others = [o for o in self.rounds if o is not r]
            own = _interval([r], against="reference").estimate
            rest = _interval(others, against="reference")
            beyond = max(math.log(rest.low) - math.log(own), math.log(own) - math.log(rest.high), 0.0)
            if beyond > worst:
                worst, worst_at = beyond, j
        return [r for j, r in enumerate(self.rounds) if j != worst_at]

    def versus_reference(self, confidence: float = 0.95) -> SpeedupInterval:
        """The candidate's speedup over the plan it must beat: what decides a win. A look before the
        last of a sequential decision asks a stricter ``confidence`` (``AdaptivePairs``: 0.99)."""
        return _interval(self.kept(), against="reference", between=len(self.rounds) >= BETWEEN_ROUNDS_FROM,
                         confidence=confidence)

    def versus_baseline(self) -> SpeedupInterval:
        """The candidate's speedup over the as-written plan: what the tables report."""
        return _interval(self.kept(), against="baseline", between=len(self.rounds) >= BETWEEN_ROUNDS_FROM)

    def claim(self) -> SpeedupInterval:
        """The speedup over the as-written plan as the proof states it: where a re-measurement of as
        many rounds lands, 95 times in 100 (``measure.intervals.remeasurement_interval``)."""
        return remeasurement_interval(self.versus_baseline())

    def pairs_per_round(self) -> int:
        return len(paired_seconds(self.rounds[0].reference, self.rounds[0].candidate)[0])

    def adaptive(self, max_rounds: int, goal: Goal = "win") -> AdaptivePairs:
        """The sequential decision over the kept pairs (against the reference): one round is the
        least, ``max_rounds`` the cap; ``goal`` as in ``AdaptivePairs``."""
        per_round = max(self.pairs_per_round(), 1)
        pairs = AdaptivePairs(min_pairs=per_round, max_pairs=per_round * max_rounds, goal=goal)
        for r in self.kept():
            for a, b in zip(*paired_seconds(r.reference, r.candidate), strict=True):
                pairs.add(a, b)
        return pairs

    def measurement(self) -> PlanMeasurement:
        """The candidate's first kept round, its step time restated as the first baseline's over the
        pooled speedup: absolute times from different rounds are never compared with each other."""
        first = self.kept()[0]
        speed = self.versus_baseline().estimate
        base_s = first.baseline.step_seconds
        return replace(first.candidate, step_seconds=base_s / speed) if base_s and speed > 0 else first.candidate


BETWEEN_ROUNDS_FROM = 3
"""Rounds from which the interval also accounts for the noise between rounds (see ``_interval``)."""


def _interval(rounds: list[Round], *, against: Literal["reference", "baseline"],
              between: bool = False, confidence: float = 0.95) -> SpeedupInterval:
    """The speedup interval over every pair of ``rounds``, pooled; with ``between`` (once
    ``BETWEEN_ROUNDS_FROM`` rounds were measured, a dropped burst included), widened to the interval
    over the rounds' own ratios when that is wider.

    Noise has two levels (Kalibera and Jones, 2013): the pairs of one round share its freshly built
    models, their memory placement and the load of that minute, so when rounds disagree by more
    than their pairs say, the pairs alone overstate the certainty. The interval over one ratio per
    round sees that; the union of the two never claims more than either level allows. Two rounds
    measured are too few for it (Student's t with one degree of freedom is 12.7, so a second round
    would make a close call harder to decide than the first alone): they use the pairs alone.
    """
    per_round = [paired_seconds(r.reference if against == "reference" else r.baseline, r.candidate)
                 for r in rounds]
    pooled = speedup_interval([t for a, _ in per_round for t in a], [t for _, b in per_round for t in b],
                              confidence=confidence)
    if not between or len(rounds) < 2:
        return pooled
    ratios = [speedup_interval(a, b).estimate for a, b in per_round]
    spread = speedup_interval(ratios, [1.0] * len(ratios), confidence=confidence)
    return replace(pooled, low=min(pooled.low, spread.low), high=max(pooled.high, spread.high))
