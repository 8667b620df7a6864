"""Optimality gap (slow): the greedy tuner against an exhaustive grid over the same space.

The tuner walks the knobs one at a time; the grid measures every combination of the same
knobs' applicable values, with the same warm-up and timed steps per plan as the tuner used.
Grid plans are measured interleaved in chunks, each beside the as-written baseline, and
ranked by their speed over that baseline. Then the grid's best and the tuned plan are
re-measured side by side. Prints the tuned plan's throughput as a fraction of the grid best
and the tuner's wall time as a fraction of the grid's. Targets: >= 0.95, <= 0.25.

By default the space is the tuner's own: every speed knob that applies to the workload,
compile included (the memory-saving knobs are searched only under a memory limit). A grid
over compile compiles two plans in three, so it is slow the first time; torch.compile's
on-disk caches make later runs cheaper, for the tuner and the grid alike. ``--knobs``
narrows both to the same knobs.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_vs_grid.py [--workload gpt-mini] [--knobs threads,precision]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

import torchsmith
from torchsmith.engine.loop import resolve_device
from torchsmith.engine.space import device_info, search_space
from torchsmith.harness.compare import measure_plans, refusal
from torchsmith.plan import Plan
from torchsmith.tuner.guard import GuardConfig, guard_rejection

CHUNK = 12
"""Grid plans measured interleaved at once, beside the baseline (each holds a model and optimizer)."""


def grid_plans(workload, knobs: list[str] | None) -> tuple[list[Plan], list[str]]:
    """Every combination of the applicable values of ``knobs`` (the as-written value included);
    None: every speed knob, as the tuner searches without a memory limit."""
    dev = resolve_device(None)
    axes, names = [], []
    for d in search_space(device_info(dev)):
        if (d.name in knobs) if knobs else not d.saves_memory:
            values = [v for v in d.candidates if refusal(workload, Plan().replace(**{d.plan_field: v}), dev) is None]
            if values:
                axes.append([(d.plan_field, v) for v in [getattr(Plan(), d.plan_field), *values]])
                names.append(d.name)
    return [Plan().replace(**dict(combo)) for combo in itertools.product(*axes)], names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt-mini")
    ap.add_argument("--knobs", default=None, help="comma-separated; default: the tuner's whole space")
    ap.add_argument("--budget", default="4m")
    args = ap.parse_args()
    w = torchsmith.load_workload(args.workload)
    knobs = args.knobs.split(",") if args.knobs else None

    start = time.perf_counter()
    result = torchsmith.tune(w, budget=args.budget, knobs=knobs)
    tune_s = time.perf_counter() - start
    warmup, steps = result.warmup_steps, result.timed_steps

    start = time.perf_counter()
    grid, names = grid_plans(w, knobs)
    ranked = [(1.0, Plan())]  # (speed over the chunk's baseline, plan)
    for i in range(0, len(grid), CHUNK):
        torch._dynamo.reset()  # compiled plans of earlier chunks must not count against the recompile limit
        chunk = [p for p in grid[i:i + CHUNK] if p != Plan()]
        base, *ms = measure_plans(w, [Plan(), *chunk], warmup=warmup, steps=steps, measure_memory=False)
        # The grid obeys the same guard as the tuner: a plan that changes the loss cannot be best.
        ranked += [(base.step_seconds / m.step_seconds, m.plan) for m in ms
                   if m.ok and guard_rejection(m, GuardConfig()) is None]
        print(f"  grid: {min(i + CHUNK, len(grid))}/{len(grid)} plans, {time.perf_counter() - start:.0f} s", flush=True)
    grid_speed, grid_best = max(ranked, key=lambda r: r[0])
    grid_s = time.perf_counter() - start

    best, tuned = measure_plans(w, [grid_best, result.plan], warmup=warmup, steps=3 * steps, measure_memory=False)
    print(f"{args.workload}: {len(grid)} grid plans over {', '.join(names)} "
          f"({warmup} warm-up + {steps} timed steps each, as the tuner used)")
    print(f"  grid best : {grid_best.describe()}  ({grid_speed:.2f}x the baseline in its chunk)")
    print(f"  tuned     : {result.plan.describe()}  ({result.speedup or 1:.2f}x in the tuner's proof)")
    print(f"  tuned throughput / grid best = {best.step_seconds / tuned.step_seconds:.3f}  (target >= 0.95)")
    print(f"  tuner wall time / grid wall time = {tune_s:.0f} s / {grid_s:.0f} s = {tune_s / grid_s:.2f}  "
          f"(target <= 0.25)")


if __name__ == "__main__":
    main()
