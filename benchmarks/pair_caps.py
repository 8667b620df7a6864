"""What the script tuner's pair caps find and cost: its walk and proof decisions on simulated process noise.

One knob with a true speedup is searched the way ``tune -- python train.py`` does it: 3 A/A
calibration pairs; the walk's comparison (``AdaptivePairs``, futility at the point estimate, up
to ``max_pairs``); and, when the walk accepts it, the final proof on fresh pairs, sure of
:func:`~torchsmith.tuner.script.search.proof_pairs` pairs and capped at ``proof_max_pairs``. The
budget is left out: this is what the caps allow. No process is started.

The noise is the model the proof's unit test uses, which the VM's runs fit: each process's step
time has +-10% jitter, and 1 process in 3 runs 40% slow. A pair's log-ratio then varies by about
+-0.24, where the 8-pair intervals of ``true_wins.py`` at ``--batch 4096`` read +-19-22%. At the
old caps (8, 8) the model finds a true 1.3x 30% of the time; that benchmark found it in 1 of 3 tunes.
A claim is checked as ``true_wins.py`` checks it: a re-measurement of as many fresh pairs lands
inside the claimed interval (the design it describes). ``--short-verify`` re-measures as
``verify`` does by default instead (3 to 12 pairs, stopping once it is sure the plan is not
slower, often after 3-4 pairs on a clear win): a noisier estimate than the claim describes.

    PYTHONPATH=src .venv/bin/python benchmarks/pair_caps.py [--trials 200] [--short-verify]
"""

from __future__ import annotations

import argparse
import math
import random

from torchsmith.measure.intervals import (
    AdaptivePairs,
    NoiseCalibration,
    remeasurement_interval,
    speedup_interval,
)
from torchsmith.tuner.script.search import proof_pairs


def process_seconds(rng: random.Random, base: float) -> float:
    return base * math.exp(rng.gauss(0, 0.10)) * (1.4 if rng.random() < 1 / 3 else 1.0)


def pair(rng: random.Random, speedup: float) -> tuple[float, float]:
    return process_seconds(rng, 1.0), process_seconds(rng, 1.0 / speedup)


def tune_once(rng: random.Random, speedup: float, max_pairs: int, proof_max_pairs: int,
              short_verify: bool = False) -> tuple[bool, int, bool]:
    """Whether the tune claims the knob, the pairs it spent on it (calibration left out), and whether an
    independent re-measurement (as many pairs as the claim, or ``verify``'s default) lands inside the claim."""
    aa = [pair(rng, 1.0) for _ in range(3)]
    noise = NoiseCalibration(spread=speedup_interval(*zip(*aa, strict=True)).half_width, pairs=3)
    walk = AdaptivePairs(min_pairs=3, max_pairs=max_pairs, futile_below_margin=True)
    while walk.need_more():
        walk.add(*pair(rng, speedup))
    if walk.interval().verdict() != "faster":
        return False, walk.pairs, True
    sure = proof_pairs(noise, [walk.interval()], 3, proof_max_pairs)
    proof = AdaptivePairs(min_pairs=3, max_pairs=proof_max_pairs)
    while proof.need_more() or proof.pairs < sure:
        proof.add(*pair(rng, speedup))
    if proof.interval().verdict() != "faster":
        return False, walk.pairs + proof.pairs, True
    claim = remeasurement_interval(proof.interval())
    again = AdaptivePairs(min_pairs=3 if short_verify else claim.pairs, max_pairs=max(12, claim.pairs),
                          goal="no_regression")
    while again.need_more():
        again.add(*pair(rng, speedup))
    estimate = again.interval().estimate
    return True, walk.pairs + proof.pairs, claim.low <= estimate <= claim.high


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200, help="tunes per cell (200: about 4 minutes)")
    ap.add_argument("--short-verify", action="store_true", help="re-measure as verify does by default (3-12 pairs)")
    args = ap.parse_args()
    caps = [(8, 8), (12, 12), (16, 16), (16, 24), (24, 24)]
    print(f"{args.trials} tunes per cell; each cell: share claimed / mean pairs spent on the knob / share of "
          "claims a re-measurement lands inside")
    print(f"{'true':>5} | " + " | ".join(f"{f'walk {w}, proof {p}':>22}" for w, p in caps))
    for speedup in (1.0, 1.1, 1.2, 1.3, 1.4, 1.6):
        cells = []
        for w, p in caps:
            rng = random.Random(0)
            runs = [tune_once(rng, speedup, w, p, args.short_verify) for _ in range(args.trials)]
            claimed = [held for found, _, held in runs if found]
            held = f"{sum(claimed) / len(claimed):.0%}" if claimed else "-"
            pairs = sum(n for _, n, _ in runs) / len(runs)
            cells.append(f"{len(claimed) / len(runs):>5.0%} / {pairs:>5.1f} / {held:>5}")
        print(f"{speedup:>5.2f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
