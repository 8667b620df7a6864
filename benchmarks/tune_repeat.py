"""Repeatable tuning: several consecutive ``tune`` runs of one workload, then their plans side by side.

Runs ``tune WORKLOAD --budget B`` ``--runs`` times in this process (each a full search from a
fresh start), then re-measures every distinct plan found, together with the plan as written,
interleaved over the same seed and batches (``measure_plans``), with more steps than the tuner
used. Prints each run's claimed speedup, the re-measured one, and the slowest plan over the
fastest. Target (issue 15): the slowest tuned plan at least 0.9x the fastest.

A full run costs ``runs x budget`` plus the re-measurement: 15+ minutes at the default 3 x 5m.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_repeat.py [--workload hf-gpt2] [--budget 5m] [--runs 3] [--steps 12]
"""

from __future__ import annotations

import argparse
import time

import torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.plan import Plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="hf-gpt2")
    ap.add_argument("--budget", default="5m")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per plan in the re-measurement")
    args = ap.parse_args()
    workload = torchsmith.load_workload(args.workload)
    results = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        r = torchsmith.tune(workload, budget=args.budget)
        results.append(r)
        print(f"run {i + 1}: {r.speedup or 1:.2f}x claimed in {time.perf_counter() - t0:.0f} s: {r.plan.describe()}",
              flush=True)
    plans = [Plan()] + list(dict.fromkeys(r.plan for r in results if r.plan != Plan()))
    measured = measure_plans(workload, plans, steps=args.steps, measure_memory=False)
    base = measured[0].step_seconds
    speed = {p: base / m.step_seconds for p, m in zip(plans, measured, strict=True)}
    speed[Plan()] = 1.0  # a plan measured against itself is 1 by construction
    print(f"\nre-measured side by side ({args.steps} steps each, interleaved), vs as written:")
    for i, r in enumerate(results):
        print(f"  run {i + 1}: {speed[r.plan]:.2f}x re-measured ({r.speedup or 1:.2f}x claimed)  {r.plan.describe()}")
    ratios = [speed[r.plan] for r in results]
    worst = min(ratios) / max(ratios)
    print(f"slowest tuned plan / fastest: {worst:.2f} (target >= 0.9: {'met' if worst >= 0.9 else 'NOT met'})")


if __name__ == "__main__":
    main()
