"""Never worse: on every built-in workload, the tuned plan re-measured beside the as-written plan.

For each workload: tune within a budget, then measure [as written, tuned] side by side again
(interleaved, more steps than the tuner used) and print the ratio. Target: >= 0.98 everywhere.
Also prints MFU of the baseline and the tuned plan against the machine's measured peak.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_never_worse.py [--budget 2m] [--workloads mlp,cnn-mini,gpt-mini]
"""

from __future__ import annotations

import argparse

import torch

import torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.harness.run_metrics import flops_per_step, matmul_dtype
from torchsmith.measure.peak import checked_mfu, machine_peak_flops
from torchsmith.plan import Plan

_PEAKS: dict = {}


def peak_once(device, dtype, *, threads=None, refresh=False):
    """One peak per (dtype, threads) for the whole table: on a loaded machine the peak is not
    cached on disk, and two measurements of it would give one plan two MFUs."""
    if refresh or (dtype, threads) not in _PEAKS:
        _PEAKS[dtype, threads] = machine_peak_flops(device, dtype, threads=threads, refresh=refresh)
    return _PEAKS[dtype, threads]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="2m")
    ap.add_argument("--workloads", default="mlp,cnn-mini,gpt-mini")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    print(f"{'workload':<10} {'tune says':>9} {'re-measured':>11} {'MFU base':>9} {'MFU tuned':>9}  tuned plan")
    worst = float("inf")
    for name in args.workloads.split(","):
        w = torchsmith.load_workload(name)
        result = torchsmith.tune(w, budget=args.budget)
        if result.plan == Plan():
            # The tuner kept the plan as written: the same code runs, so the ratio is 1 by construction
            # (measuring a plan against itself would only print this machine's noise).
            base = tuned = measure_plans(w, [Plan()], steps=args.steps, measure_memory=False)[0]
        else:
            base, tuned = measure_plans(w, [Plan(), result.plan], steps=args.steps, measure_memory=False)
        ratio = base.step_seconds / tuned.step_seconds
        worst = min(worst, ratio)
        flops = flops_per_step(w, torch.device("cpu"))
        # Each against the peak of its own dtype and threads; None (printed "-") rather than above 100%.
        mfus = [checked_mfu(flops, m.step_seconds, "cpu", matmul_dtype(p), threads=p.threads.intra_op,
                            peak_fn=peak_once)[0]
                for m, p in ((base, Plan()), (tuned, result.plan))]
        shown = [f"{v:>9.1%}" if v is not None else f"{'-':>9}" for v in mfus]
        print(f"{name:<10} {result.speedup or 1:>8.2f}x {ratio:>10.2f}x {shown[0]} {shown[1]}  "
              f"{result.plan.describe()}")
    print(f"worst re-measured ratio: {worst:.2f}x (target >= 0.98)")


if __name__ == "__main__":
    main()
