"""Under a memory limit below the baseline's peak, the tuner finds a plan that fits.

Measures gpt-mini's as-written peak, sets the limit to a fraction of it, tunes the
memory-saving knobs and prints the chosen plan, its peak and its speed cost, beside the
other plans that fit (so "the smallest measured speed cost" can be checked by eye).

    PYTHONPATH=src .venv/bin/python benchmarks/tune_memory_limit.py [--fraction 0.7]
"""

from __future__ import annotations

import argparse

import torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.plan import Plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt-mini")
    ap.add_argument("--fraction", type=float, default=0.7)
    ap.add_argument("--budget", default="5m")
    args = ap.parse_args()
    w = torchsmith.load_workload(args.workload)
    base = measure_plans(w, [Plan()], warmup=1, steps=1)[0]
    limit = int(base.peak_memory_bytes * args.fraction)
    result = torchsmith.tune(w, budget=args.budget, memory_limit=limit,
                             knobs=["checkpointing", "saved_tensors", "microbatching"])
    mib = 2**20
    print(f"{args.workload}: baseline peak {base.peak_memory_bytes / mib:.1f} MiB, limit {limit / mib:.1f} MiB")
    for c in result.candidates:
        fits = c.peak_memory_bytes is not None and c.peak_memory_bytes <= limit
        print(f"  {c.status:<9} {c.change:<50} peak {c.peak_memory_bytes / mib if c.peak_memory_bytes else 0:7.1f} MiB "
              f"{'fits' if fits else '    '} speed {c.speedup or 0:.2f}x")
    print(f"chosen: {result.plan.describe()}  peak {result.best.peak_memory_bytes / mib:.1f} MiB "
          f"(fits: {result.best.peak_memory_bytes <= limit}), speed vs baseline {result.speedup:.2f}x")


if __name__ == "__main__":
    main()
