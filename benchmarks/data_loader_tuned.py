"""Tuned DataLoader vs ``num_workers=0`` on cnn-mini's decoding pipeline, side by side.

cnn-mini's ``__getitem__`` does real work per sample: decode a 176x176 JPEG out of the
packed store, RandomResizedCrop to 32x32, flip, normalise. ``tune_loader`` picks the loader arguments;
then, alternating round by round in one process:

1. loader alone: samples/s of the tuned loader vs the loader as written (0 workers);
2. training: ``run`` of cnn-mini as written vs with the tuned ``plan.loader``, samples/s of
   whole steps (data wait included), and the share of the step spent waiting for data.

On a CPU the trainer and the workers share the cores, so (2) can gain much less than (1); on
a GPU machine the step leaves the CPU cores to the workers. Only the ratios mean anything.

    PYTHONPATH=src .venv/bin/python benchmarks/data_loader_tuned.py [--steps 12] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from torchsmith.data.loader_tune import measure_loader, tune_loader
from torchsmith.engine.loop import run
from torchsmith.plan import Plan
from torchsmith.workloads import cnn_mini


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12, help="training steps per run in part 2 (0 skips it)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", type=int, default=20, help="batches per timed loader pass")
    ap.add_argument("--threads", type=int, default=None, help="trainer intra-op threads (default: PyTorch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    w = cnn_mini.workload(0)
    factory, per_batch, written = w.loader, w.samples_per_batch, w.loader.written.effective()
    result = tune_loader(factory, samples_per_batch=per_batch, written=written, batches=args.batches,
                         passes=2, rounds=1, try_batch_fetch=False)
    tuned = result.best.args
    print(f"cores: {result.cores}; trainer threads: {torch.get_num_threads()}; batch {per_batch}")
    print(f"tuner's pick: {tuned.describe()} ({result.speedup:.2f}x in its own search)")

    rates: dict[str, list[float]] = {"as written": [], "tuned": []}
    for _ in range(args.rounds):
        for name, a in (("as written", written), ("tuned", tuned)):
            rates[name].append(measure_loader(factory, a, samples_per_batch=per_batch, batches=args.batches, passes=2))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n1. loader alone ({args.rounds} rounds x 2 passes x {args.batches} batches, median)")
    for k, v in med.items():
        print(f"   {k:10s} {v:10,.0f} samples/s  {v / med['as written']:5.2f}x")
    print(f"   tuned / num_workers=0: {med['tuned'] / med['as written']:.2f}x")

    if args.steps:
        plans = {"as written": Plan(), "tuned": Plan(loader=tuned.as_config())}
        runs: dict[str, list] = {k: [] for k in plans}
        for _ in range(args.rounds):
            for name, plan in plans.items():
                runs[name].append(run(w, plan, steps=args.steps))
        print(f"\n2. training cnn-mini ({args.rounds} alternating runs x {args.steps} steps, median step)")
        thr = {}
        for name, rs in runs.items():
            thr[name] = statistics.median(r.throughput for r in rs)
            share = statistics.median(r.phases.median.get("data", 0.0) / r.phases.step_median for r in rs)
            print(f"   {name:10s} {thr[name]:10,.0f} samples/s  data wait {share:5.1%} of the step")
        print(f"   tuned / num_workers=0: {thr['tuned'] / thr['as written']:.2f}x")
    print("\nFigures from one shared machine at one moment: compare the ratios, not the absolute rates.")


if __name__ == "__main__":
    main()
