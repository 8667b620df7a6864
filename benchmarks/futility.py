"""Futility at the point estimate: what stopping a candidate whose estimate is below the margin costs.

The script tuner's comparisons (``AdaptivePairs(futile_below_margin=True)``) end at an interim
look whose estimate of the speedup is below ``1 + NOISE_MARGIN``. This simulates candidates of a
known true ratio under log-normal-ish noise per run and prints, with and without that rule, the
share called faster and the mean pairs spent. No process is started: the decision rule alone.

    PYTHONPATH=src .venv/bin/python benchmarks/futility.py [--trials 300] [--min-pairs 3] [--max-pairs 8]
"""

from __future__ import annotations

import argparse
import random
import statistics

from torchsmith.measure.intervals import NOISE_MARGIN, AdaptivePairs


def trial(ratio: float, noise: float, rng: random.Random, futile: bool, min_pairs: int,
          max_pairs: int) -> tuple[bool, int]:
    """One candidate: pairs until decided; whether it was called faster, and how many pairs it took."""
    pairs = AdaptivePairs(min_pairs=min_pairs, max_pairs=max_pairs, futile_below_margin=futile)
    per_run = noise / 2**0.5  # each pair's ratio then varies by about +-noise
    while pairs.need_more():
        pairs.add(1.0 + rng.gauss(0, per_run), (1.0 + rng.gauss(0, per_run)) / ratio)
    return pairs.interval().verdict(NOISE_MARGIN) == "faster", pairs.pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--min-pairs", type=int, default=3)
    ap.add_argument("--max-pairs", type=int, default=8, help="the script tuner's default cap")
    args = ap.parse_args()
    rng = random.Random(0)
    print(f"{args.trials} candidates per row, {args.min_pairs}-{args.max_pairs} pairs, margin {NOISE_MARGIN:.0%}")
    head = f"{'faster':>7} {'pairs':>6}"
    print(f"{'noise':>6} {'true':>5} | {head} | {head}  (without | with futility)")
    for noise in (0.08, 0.15):
        for ratio in (1.0, 1.05, 1.10, 1.15, 1.20, 1.30):
            row = []
            for futile in (False, True):
                runs = [trial(ratio, noise, rng, futile, args.min_pairs, args.max_pairs) for _ in range(args.trials)]
                row.append(f"{sum(w for w, _ in runs) / args.trials:>7.0%} {statistics.mean(n for _, n in runs):>6.1f}")
            print(f"{noise:>6.0%} {ratio:>5.2f} | {row[0]} | {row[1]}")


if __name__ == "__main__":
    main()
