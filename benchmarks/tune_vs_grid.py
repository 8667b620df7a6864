"""Optimality gap (slow): the greedy tuner against an exhaustive grid over the same space.

The grid measures every combination of the searched knobs' values side by side; the tuner
walks them one knob at a time. Prints the tuned plan's throughput as a fraction of the grid
best (re-measured side by side) and the tuner's wall time as a fraction of the grid's.
Targets: within 5% of the grid best, in at most a quarter of the grid's wall time.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_vs_grid.py [--workload gpt-mini] [--knobs threads,precision,optimizer]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torchsmith
from torchsmith.engine.loop import resolve_device
from torchsmith.measure.compare import measure_plans
from torchsmith.plan import Plan
from torchsmith.tune.space import device_info, search_space


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt-mini")
    ap.add_argument("--knobs", default="threads,precision,optimizer,inplace")
    ap.add_argument("--budget", default="4m")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    w = torchsmith.load_workload(args.workload)
    knobs = args.knobs.split(",")
    dims = [d for d in search_space(device_info(resolve_device(None))) if d.name in knobs]

    start = time.perf_counter()
    result = torchsmith.tune(w, budget=args.budget, knobs=knobs)
    tune_s = time.perf_counter() - start

    start = time.perf_counter()
    axes = [[getattr(Plan(), d.plan_field), *d.candidates] for d in dims]
    grid = [Plan().replace(**{d.plan_field: v for d, v in zip(dims, combo)}) for combo in itertools.product(*axes)]
    measured = [m for m in measure_plans(w, grid, steps=args.steps, measure_memory=False) if m.ok]
    # The grid obeys the same guard as the tuner: a plan that changes the loss cannot be best.
    from torchsmith.tune.guard import GuardConfig, guard_rejection

    legal = [m for m in measured if guard_rejection(m, GuardConfig()) is None]
    grid_best = min(legal, key=lambda m: m.step_seconds)
    grid_s = time.perf_counter() - start

    best, tuned = measure_plans(w, [grid_best.plan, result.plan], steps=args.steps * 2, measure_memory=False)
    print(f"{args.workload}: {len(grid)} grid plans over {', '.join(d.name for d in dims)}")
    print(f"  grid best : {grid_best.plan.describe()}")
    print(f"  tuned     : {result.plan.describe()}")
    print(f"  tuned throughput / grid best = {best.step_seconds / tuned.step_seconds:.3f}  (target >= 0.95)")
    print(f"  tuner wall time / grid wall time = {tune_s:.0f} s / {grid_s:.0f} s = {tune_s / grid_s:.2f}  (target <= 0.25)")


if __name__ == "__main__":
    main()
