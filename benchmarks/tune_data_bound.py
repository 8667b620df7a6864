"""Real gains where they exist: cnn-mini with its decoding loader as written (num_workers=0).

Tunes the loader and thread knobs and re-measures the tuned plan against the as-written
one, one after the other (plans with workers are not interleaved). Target: >= 1.5x where
the workload is data-bound; the breakdown printed first says whether it is, on this machine.
Also prints why the pair matters: fewer trainer threads alone, workers alone, and both.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_data_bound.py [--budget 4m]
"""

from __future__ import annotations

import argparse

import torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.plan import LoaderConfig, Plan, Threads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="4m")
    ap.add_argument("--steps", type=int, default=40, help="timed steps of the re-measurement (~2 s a plan)")
    args = ap.parse_args()
    w = torchsmith.load_workload("cnn-mini")
    run = torchsmith.run(w, steps=args.steps)
    share = run.phases.median["data"] / max(run.phases.step_median, 1e-9)
    data_ms, step_ms = run.phases.median["data"] * 1e3, run.phases.step_median * 1e3
    print(f"cnn-mini as written: data wait {data_ms:.0f} ms of a {step_ms:.0f} ms step, {share:.0%} "
          f"({'data-bound' if share > 0.1 else 'not data-bound'})")
    # Workers and the trainer's threads share the cores: each alone, then together.
    one_thread, workers = Threads(intra_op=1), LoaderConfig(num_workers=2, persistent_workers=True)
    pairs = {"1 trainer thread": Plan(threads=one_thread), "2 workers": Plan(loader=workers),
             "2 workers + 1 trainer thread": Plan(threads=one_thread, loader=workers)}
    base, *ms = measure_plans(w, [Plan(), *pairs.values()], steps=args.steps, measure_memory=False)
    print("  " + ", ".join(f"{name} {base.step_seconds / m.step_seconds:.2f}x"
                           for name, m in zip(pairs, ms, strict=True)))
    result = torchsmith.tune(w, budget=args.budget, knobs=["threads", "loader"])
    base, tuned = measure_plans(w, [Plan(), result.plan], steps=args.steps, measure_memory=False)
    print(f"tuned plan: {result.plan.describe()}  ({result.speedup or 1:.2f}x in the tuner's proof)")
    print(f"re-measured speedup: {base.step_seconds / tuned.step_seconds:.2f}x  "
          f"(target >= 1.5x on a data-bound workload)")


if __name__ == "__main__":
    main()
