"""How sure a speedup is: a 95% interval on every ratio, the win rule, the machine's own noise.

A ratio printed without its uncertainty is folklore: on a 2-core VM one measured run of a
script's step varies by 15-20% from process to process, and a single look once read 2.34x for a
change that did nothing. Every speedup here is therefore a :class:`SpeedupInterval` built from
*paired* samples (``baseline[i]`` and ``candidate[i]`` measured side by side: one interleaved
round, or one A B B A pair of processes), and a candidate wins only when the interval's low end
clears ``1 + NOISE_MARGIN``.

- :func:`speedup_interval`: the point estimate and its 95% interval, bootstrap over pairs.
- :func:`calibrate`: an A/A run (as written against itself) says how noisy the machine is, and
  how many pairs a claim of a given size needs (:class:`NoiseCalibration`).
- :func:`noise_floored`: an interval no narrower than the noise pooled over a tune's experiments.
- :class:`AdaptivePairs`: the sequential decision, which adds pairs to a close call until the
  verdict is decided or the cap is hit.

Example::

    iv = speedup_interval([1.02, 0.98, 1.01, 1.00], [0.71, 0.70, 0.74, 0.72])
    iv.describe()   # '1.40x (95% interval 1.35-1.45, 4 pairs)'
    iv.verdict()    # 'faster'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from torchsmith.measure.student_t import normal_cdf, t_quantile

NOISE_MARGIN = 0.03
"""The one margin: a candidate wins only if its interval's low end clears ``1 + NOISE_MARGIN``.
3% is below every gain worth a knob, and above the residual bias of interleaved measurement."""

Verdict = Literal["faster", "slower", "not distinguishable"]

NEVER = 2 ** 31
"""What :meth:`NoiseCalibration.pairs_needed` returns for a claim no number of pairs can make
(an effect at or below the margin, or a machine whose noise is unknown)."""


@dataclass(frozen=True, kw_only=True)
class SpeedupInterval:
    """A speedup with its uncertainty: baseline seconds over candidate seconds (> 1: faster)."""

    estimate: float
    """Point estimate: the geometric mean of the per-pair ratios baseline/candidate."""
    low: float
    """Low end of the interval (0.0 when there is a single pair: nothing bounds it)."""
    high: float
    """High end of the interval (``math.inf`` when there is a single pair)."""
    pairs: int
    """Number of paired samples the interval rests on."""
    confidence: float = 0.95
    """Coverage the interval is built for: 0.95 means 95 of 100 such intervals hold the true ratio."""

    def verdict(self, margin: float = NOISE_MARGIN) -> Verdict:
        """'faster' when the whole interval clears ``1 + margin``; 'slower' when it lies wholly
        below 1.0; else 'not distinguishable' (never adopted, never called a regression)."""
        if self.low > 1 + margin:
            return "faster"
        if self.high < 1:
            return "slower"
        return "not distinguishable"

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.high) and self.pairs > 1

    @property
    def half_width(self) -> float:
        """Relative half-width of the interval on the log scale: 0.05 means roughly +-5%."""
        if not self.bounded:
            return math.inf
        return math.expm1((math.log(self.high) - math.log(self.low)) / 2)

    def describe(self) -> str:
        """'1.38x (95% interval 1.29-1.47, 8 pairs)'."""
        if not self.bounded:
            return f"{self.estimate:.2f}x (1 pair: no interval)"
        return (f"{self.estimate:.2f}x ({self.confidence:.0%} interval {self.low:.2f}-{self.high:.2f}, "
                f"{self.pairs} pairs)")

    def to_json(self) -> dict[str, Any]:
        """``{estimate, low, high, confidence, pairs}``; an unbounded ``high`` is ``None`` (JSON has no inf)."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high if math.isfinite(self.high) else None,
                "confidence": self.confidence, "pairs": self.pairs}


def remeasurement_interval(iv: SpeedupInterval) -> SpeedupInterval:
    """Where a re-measurement of the same design (as many pairs, rounds or processes) lands, 95 times
    in 100: the interval a *claim* states, since a claim is checked by measuring again.

    A 95% interval holds the true ratio; it is not where the next estimate falls, because that
    estimate has noise of its own. The difference of two independent, equally noisy estimates
    spreads sqrt(2) times as wide as either one, so the interval is widened sqrt(2)-fold about its
    estimate, on the log scale (where a ratio's noise is symmetric). Measured: ``tune mlp``'s
    proof claimed 1.32x (95% interval 1.30-1.34) and fresh ``verify`` runs read 1.29x and 1.34x.

    Example::

        remeasurement_interval(SpeedupInterval(estimate=1.3, low=1.2, high=1.4, pairs=8))  # ~1.16-1.45
    """
    if not iv.bounded:
        return iv
    centre = math.log(iv.estimate)
    stretch = math.sqrt(2)
    low = math.exp(centre - stretch * (centre - math.log(iv.low))) if iv.low > 0 else 0.0
    return replace(iv, low=low, high=math.exp(centre + stretch * (math.log(iv.high) - centre)))


def speedup_interval(baseline: Sequence[float], candidate: Sequence[float], *, confidence: float = 0.95,
                     resamples: int = 2000, seed: int = 0) -> SpeedupInterval:
    """The speedup of ``candidate`` over ``baseline`` from paired samples, with its interval.

    ``baseline[i]`` and ``candidate[i]`` are seconds measured side by side: the same interleaved
    round, or one A B B A pair of processes.

    Why this statistic: pairing cancels drift. Two samples of one pair saw the same moment of a
    shared machine (its load, its clock frequency), so their ratio carries the difference between
    the plans and little of the machine's; ratios from different moments are never mixed. The
    ratios are averaged as logs (a geometric mean) because log-ratios are symmetric: a 2x win and
    a 2x loss weigh the same, and 1/estimate is exactly the estimate of the swapped comparison.

    Why this interval: the bootstrap over pairs (resample the pairs with replacement, 2000 times,
    seeded so that the same samples give the same interval) makes no assumption on the shape of
    the noise, which on a shared machine is skewed by bursts. A plain percentile bootstrap is too
    narrow for the few pairs a tune can afford (about 89% coverage at 8 pairs), so it is the
    *expanded* percentile bootstrap (Hesterberg, "What teachers should know about the bootstrap",
    2015): its percentiles are widened by the Student-t factor sqrt(n/(n-1)) t(n-1). And because
    a bootstrap cannot reach past the range of its few samples, the interval is at least the
    Student-t interval on the mean log-ratio. One pair bounds nothing: [0, inf].

    Example::

        speedup_interval([2.0, 2.1, 1.9], [1.0, 1.0, 1.0]).estimate   # ~2.0
    """
    b, c = _paired(baseline, candidate)
    n = len(b)
    logs = np.log(b) - np.log(c)
    centre = float(logs.mean())
    if n == 1:
        return SpeedupInterval(estimate=math.exp(centre), low=0.0, high=math.inf, pairs=1, confidence=confidence)
    alpha = 1 - confidence
    t = t_quantile(1 - alpha / 2, n - 1)
    spread = t * float(logs.std(ddof=1)) / math.sqrt(n)
    tail = normal_cdf(-math.sqrt(n / (n - 1)) * t)  # the expanded percentile's tail probability
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    boot_low, boot_high = np.quantile(means, [tail, 1 - tail])
    low = min(float(boot_low), centre - spread)
    high = max(float(boot_high), centre + spread)
    return SpeedupInterval(estimate=math.exp(centre), low=math.exp(low), high=math.exp(high), pairs=n,
                           confidence=confidence)


def implied_log_sd(iv: SpeedupInterval) -> float:
    """The standard deviation of one pair's log-ratio that a bounded interval implies: its log
    half-width times sqrt(pairs) over the Student-t factor (an upper estimate where the bootstrap
    made the interval wider than the t interval)."""
    if not iv.bounded or iv.low <= 0:
        return math.inf
    return _log_sd((math.log(iv.high) - math.log(iv.low)) / 2, iv.pairs, iv.confidence)


def _log_sd(log_half_width: float, pairs: int, confidence: float) -> float:
    """The per-pair sd of the log-ratio behind a t interval of ``log_half_width`` over ``pairs`` pairs."""
    return log_half_width * math.sqrt(pairs) / t_quantile(1 - (1 - confidence) / 2, pairs - 1)


def noise_floored(iv: SpeedupInterval, noise: Sequence[tuple[float, int]]) -> SpeedupInterval:
    """``iv``, widened where the noise pooled over one tune's experiments says its pairs agreed by luck.

    ``noise`` is ``(per-pair log-ratio sd, pairs)`` for each experiment of the same script on the same
    machine in the same tune (the A/A run, the candidates); ``iv``'s own sd is pooled in with them.
    Three pairs that happen to agree within 1% give a +-1-2% interval, even where the machine's
    runs differ by +-20%: a sample sd from 2 degrees of freedom is itself that uncertain. The
    scripts' ten-repeat ``benchmarks/claims_hold.py`` run missed 2 of 11 claims: both were 3-pair
    claims, +-1.6% and +-5%, where the same tune's A/A run read +-25% and +-2% and its candidates
    +-5-7%. Pooling (the variance weighted by degrees of freedom, as a two-sample t test pools it)
    estimates the noise from every pair the tune measured; the interval returned is the wider of
    ``iv`` and the pooled t interval about the same estimate, so it never narrows.

    Example::

        noise_floored(SpeedupInterval(estimate=1.26, low=1.25, high=1.27, pairs=3), [(0.09, 3), (0.03, 4)])
    """
    pooled, df = pooled_log_sd([*noise, (implied_log_sd(iv), iv.pairs)])
    if not iv.bounded or df < 1:
        return iv
    spread = t_quantile(1 - (1 - iv.confidence) / 2, df) * pooled / math.sqrt(iv.pairs)
    centre = math.log(iv.estimate)
    return replace(iv, low=min(iv.low, math.exp(centre - spread)), high=max(iv.high, math.exp(centre + spread)))


def pooled_log_sd(parts: Sequence[tuple[float, int]]) -> tuple[float, int]:
    """The per-pair log-ratio sd pooled over experiments ``(sd, pairs)``, weighted by their degrees of
    freedom (each experiment's own mean removed, as a two-sample t test pools), and those degrees of
    freedom: ``(inf, 0)`` when no experiment had two pairs.

    >>> pooled_log_sd([(0.1, 3), (0.2, 3)])[1]
    4
    """
    kept = [(sd, n) for sd, n in parts if n > 1 and math.isfinite(sd)]
    df = sum(n - 1 for _, n in kept)
    if df < 1:
        return math.inf, 0
    return math.sqrt(sum((n - 1) * sd * sd for sd, n in kept) / df), df


def _paired(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    if b.ndim != 1 or b.shape != c.shape or len(b) == 0:
        raise ValueError(f"a speedup interval needs paired samples: as many baseline as candidate times, at "
                         f"least one; got {len(b)} baseline and {len(c)} candidate.\n"
                         "Tip: pass the two plans' times round by round, baseline[i] measured beside candidate[i].")
    bad = ~(np.isfinite(b) & np.isfinite(c) & (b > 0) & (c > 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"a speedup interval needs positive, finite seconds; pair {i} is "
                         f"({b[i]!r}, {c[i]!r}).\nTip: drop pairs whose timing failed before computing the ratio.")
    return b, c


@dataclass(frozen=True, kw_only=True)
class NoiseCalibration:
    """The machine's own noise, from an A/A run: the as-written plan measured against itself."""

    spread: float
    """Half-width of the A/A ratio's 95% interval, relative: 0.12 means the A/A mean ratio lies within
    +-12% of 1.0. It shrinks with :attr:`pairs`; how much two runs differ is :meth:`pair_range`."""
    pairs: int
    """Pairs of the A/A run the spread was measured over."""
    confidence: float = 0.95
    """Coverage of the intervals the claims will be judged by."""

    def per_pair_spread(self) -> float:
        """The standard deviation of one pair's log-ratio that the A/A interval implies."""
        if self.pairs < 2 or not math.isfinite(self.spread):
            return math.inf
        return _log_sd(math.log1p(self.spread), self.pairs, self.confidence)

    def low_end(self, effect: float, pairs: int) -> float:
        """Where the interval's low end is expected to sit for a true speedup ``effect`` over ``pairs`` pairs."""
        if pairs < 2:
            return 0.0
        t = t_quantile(1 - (1 - self.confidence) / 2, pairs - 1)
        return effect * math.exp(-t * self.per_pair_spread() / math.sqrt(pairs))

    def pairs_needed(self, effect: float, margin: float = NOISE_MARGIN) -> int:
        """Pairs for a true ``effect``x speedup to clear ``1 + margin`` (at the expected noise);
        ``NEVER`` when no number of pairs does."""
        if effect <= 1 + margin or not math.isfinite(self.per_pair_spread()):
            return NEVER
        # low_end grows with n (t shrinks, sqrt(n) grows): double to a bracket, then bisect. A scan
        # of every n costs minutes on a very noisy machine (one t quantile is ~1 ms).
        clears = lambda n: self.low_end(effect, n) > 1 + margin  # noqa: E731
        hi = 2
        while not clears(hi):
            if hi >= 100_000:
                return NEVER
            hi *= 2
        lo = hi // 2 if hi > 2 else 1  # clears(lo) is False (or lo < 2)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if clears(mid) else (mid, hi)
        return max(hi, 2)

    def smallest_claim(self, pairs: int, margin: float = NOISE_MARGIN) -> float:
        """The smallest speedup that ``pairs`` pairs can tell from noise (``inf`` if none can)."""
        if pairs < 2 or not math.isfinite(self.per_pair_spread()):
            return math.inf
        t = t_quantile(1 - (1 - self.confidence) / 2, pairs - 1)
        return (1 + margin) * math.exp(t * self.per_pair_spread() / math.sqrt(pairs))

    def too_noisy(self, max_pairs: int, effect: float = 1.10) -> bool:
        """True when even ``max_pairs`` pairs cannot tell a true ``effect``x speedup from noise."""
        return self.pairs_needed(effect) > max_pairs

    def pair_range(self) -> float:
        """How far one pair's ratio strays from 1.0, ``confidence`` of the time: two runs side by side
        differ by +-this. A property of the machine and the work, not of how many pairs measured it.

        The A/A interval's half-width (:attr:`spread`) is not: it shrinks as pairs are added. Printed
        as the noise, it read +-32% from 3 pairs and +-5% from 40 for the same synthetic machine (a
        pair's ratio within +-32%, 95 times in 100; medians of 400 simulated A/A runs,
        ``benchmarks/noise_figure.py``); this read +-25% and +-32%. From 3 pairs it is still a rough
        figure: 10% of those runs read under +-10%."""
        sd = self.per_pair_spread()
        return math.expm1(NormalDist().inv_cdf(1 - (1 - self.confidence) / 2) * sd) if math.isfinite(sd) else math.inf

    @classmethod
    def pooled(cls, parts: Sequence[tuple[float, int]], confidence: float = 0.95) -> NoiseCalibration:
        """The noise of several experiments ``(per-pair log sd, pairs)`` on the same work, pooled
        (:func:`pooled_log_sd`): the calibration an A/A run with as many degrees of freedom would give,
        so its :attr:`pairs` is the degrees of freedom plus one."""
        sd, df = pooled_log_sd(parts)
        if df < 1:
            return cls(spread=math.inf, pairs=1, confidence=confidence)
        half = t_quantile(1 - (1 - confidence) / 2, df) * sd / math.sqrt(df + 1)
        return cls(spread=math.expm1(half), pairs=df + 1, confidence=confidence)

    def describe(self) -> str:
        """'runs differ by +-12% here (a pair's ratio, 95%, from 8 pairs); claims below 1.15x need more
        than 8 pairs (1.10x: 14)'."""
        if not math.isfinite(self.per_pair_spread()):
            return f"the noise is unknown ({self.pairs} A/A pair): no claim can be told from noise"
        needed = self.pairs_needed(1.10)
        return (f"runs differ by ±{self.pair_range():.0%} here (a pair's ratio, {self.confidence:.0%}, from "
                f"{self.pairs} pairs); claims below {self.smallest_claim(self.pairs):.2f}x need more than "
                f"{self.pairs} pairs (1.10x: {needed if needed < NEVER else 'never'})")

    def to_json(self) -> dict[str, Any]:
        finite = lambda x: x if math.isfinite(x) else None  # noqa: E731
        return {"pair_range": finite(self.pair_range()), "spread": finite(self.spread), "pairs": self.pairs,
                "confidence": self.confidence, "pairs_for_1.10x": self.pairs_needed(1.10)}


def calibrate(first: Sequence[float], second: Sequence[float], *, confidence: float = 0.95) -> NoiseCalibration:
    """The noise of an A/A run: ``first[i]`` and ``second[i]`` are the same plan, measured side by side.

    Example::

        calibrate([1.0, 1.1, 0.9, 1.0], [1.05, 1.0, 0.95, 1.1]).pair_range()   # ~0.18: runs differ by +-18%
    """
    iv = speedup_interval(first, second, confidence=confidence)
    return NoiseCalibration(spread=iv.half_width, pairs=iv.pairs, confidence=confidence)


Goal = Literal["win", "no_regression"]


class AdaptivePairs:
    """The sequential decision: add pairs until the verdict is decided or the cap is hit.

    ``goal="win"`` (tune) asks whether a candidate clears the margin: it is decided once the
    interval says faster or slower, or once the interval's high end cannot reach ``1 + margin``.
    ``goal="no_regression"`` (verify) asks whether a plan is slower: decided once the interval
    lies wholly above or below 1.0. Either stops when the interval is narrower than
    ``narrow_enough``: at +-1% more pairs only refine an effect that is already known to within
    a third of the margin.

    Peeking after every pair inflates the error rate of a fixed-n interval: with a 95% interval
    at every look, a true 1.00x at +-10% noise per time was called faster 5.8% of the time over
    3-12 pairs (500 synthetic runs). So an early stop on a verdict needs the stricter
    ``interim_confidence`` (99%) interval to decide, and only the last look, at the cap, is
    judged at 95% (the Haybittle-Peto design of clinical trials): that cut the false wins to
    1.8%, and a 2x win at +-15% noise still stops after about 4 pairs. Stopping for futility
    (the interval cannot reach the margin) claims nothing, so it reads the 95% interval.

    ``futile_below_margin`` (the script tuner, where a pair is two fresh processes) also stops at
    an interim look whose estimate is below ``1 + margin``: the data so far show no win to
    confirm, and a win that would clear the margin at the cap rarely reads that low after
    ``min_pairs``. Over 300 synthetic candidates each (3 to 8 pairs; ``benchmarks/futility.py``), a
    true 1.00x took 3.9 pairs instead of 7.3 at +-8% noise per pair (4.1 instead of 7.6 at +-15%),
    and the share of 1.10-1.30x wins found moved by at most 6 points (1.10x at +-8%: 60% -> 54%;
    each share is +-3 points at 300 trials). False wins stayed at 1-2%.

    Example::

        pairs = AdaptivePairs()
        while pairs.need_more():
            pairs.add(*measure_one_round())
        pairs.interval().verdict()
    """

    def __init__(self, *, min_pairs: int = 3, max_pairs: int = 12, margin: float = NOISE_MARGIN,
                 narrow_enough: float = 0.01, goal: Goal = "win", confidence: float = 0.95,
                 interim_confidence: float = 0.99, futile_below_margin: bool = False) -> None:
        if not 1 <= min_pairs <= max_pairs:
            raise ValueError(f"AdaptivePairs needs 1 <= min_pairs <= max_pairs, got min_pairs={min_pairs}, "
                             f"max_pairs={max_pairs}.\nTip: raise max_pairs to at least min_pairs.")
        self.min_pairs, self.max_pairs, self.margin = min_pairs, max_pairs, margin
        self.narrow_enough, self.goal, self.confidence = narrow_enough, goal, confidence
        self.interim_confidence = max(interim_confidence, confidence)
        self.futile_below_margin = futile_below_margin
        self.baseline: list[float] = []
        self.candidate: list[float] = []

    @property
    def pairs(self) -> int:
        return len(self.baseline)

    def add(self, baseline_seconds: float, candidate_seconds: float) -> None:
        self.baseline.append(baseline_seconds)
        self.candidate.append(candidate_seconds)

    def interval(self) -> SpeedupInterval:
        return speedup_interval(self.baseline, self.candidate, confidence=self.confidence)

    def decided(self) -> bool:
        """True when more pairs would not change what is done with the candidate."""
        if self.pairs < self.min_pairs:
            return False
        iv = self.interval()
        if iv.half_width <= self.narrow_enough:
            return True
        if self.futile_below_margin and self.goal == "win" and iv.estimate < 1 + self.margin:
            return True  # futility at the point estimate: nothing to confirm (claims nothing, so 95% is read)
        # At the cap the verdict is final anyway; before it, only the stricter interval may end the run.
        strict = iv if self.pairs >= self.max_pairs else speedup_interval(
            self.baseline, self.candidate, confidence=self.interim_confidence)
        if self.goal == "no_regression":
            return strict.low >= 1 or strict.high < 1
        return strict.verdict(self.margin) != "not distinguishable" or iv.high <= 1 + self.margin

    def need_more(self) -> bool:
        return not self.decided() and self.pairs < self.max_pairs
