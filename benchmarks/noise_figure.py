"""Which noise figure describes the machine? The A/A interval's half-width against one pair's range.

A synthetic machine whose pair log-ratio has sd ``--noise`` * sqrt(2) (two runs side by side differ by
+-exp(1.96 sd) - 1, 95 times in 100): for each pair count it simulates ``--runs`` A/A calibrations and
prints the medians and 10th percentiles of :attr:`NoiseCalibration.spread` (the half-width of the A/A
ratio's interval, the figure printed before 03f7f04) and of :meth:`NoiseCalibration.pair_range` (the
figure printed now). The first shrinks with the pairs; the second stays near the truth.

    PYTHONPATH=src .venv/bin/python benchmarks/noise_figure.py [--runs 400] [--noise 0.1]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from torchsmith.measure.intervals import calibrate


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400, help="simulated A/A runs per pair count")
    ap.add_argument("--noise", type=float, default=0.1, help="sd of one run's log step time")
    ap.add_argument("--pairs", default="3,5,8,16,40", help="pair counts to simulate")
    args = ap.parse_args()
    truth = math.expm1(1.96 * args.noise * math.sqrt(2))
    print(f"a pair's ratio is within +-{truth:.0%} of 1.0, 95 times in 100 (the truth)")
    print(f"{'pairs':>5}  {'spread: median':>14}  {'p10':>5}  {'pair_range: median':>18}  {'p10':>5}")
    for pairs in (int(p) for p in args.pairs.split(",")):
        rng = np.random.default_rng(pairs)
        cals = [calibrate(np.exp(rng.normal(0.0, args.noise, pairs)), np.exp(rng.normal(0.0, args.noise, pairs)))
                for _ in range(args.runs)]
        spread = np.array([c.spread for c in cals])
        ranges = np.array([c.pair_range() for c in cals])
        print(f"{pairs:>5}  {np.median(spread):>14.0%}  {np.percentile(spread, 10):>5.0%}  "
              f"{np.median(ranges):>18.0%}  {np.percentile(ranges, 10):>5.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
