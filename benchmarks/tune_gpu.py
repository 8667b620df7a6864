"""GPU, where one is lent: gpt-mini tuned vs fp32 eager (AMP + compile + fused optimizer).

Target: >= 1.5x. Without CUDA it says so and exits 0.

    PYTHONPATH=src .venv/bin/python benchmarks/tune_gpu.py [--budget 5m]
"""

from __future__ import annotations

import argparse

import torch

import torchsmith
from torchsmith.harness.compare import measure_plans
from torchsmith.plan import Plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="5m")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU benchmark needs one (run it on the lent GPU machine)")
        return
    w = torchsmith.load_workload("gpt-mini")
    result = torchsmith.tune(w, budget=args.budget, device="cuda")
    base, tuned = measure_plans(w, [Plan(), result.plan], steps=20, device="cuda")
    print(f"{torch.cuda.get_device_name()}: tuned plan {result.plan.describe()}")
    print(f"tuned vs fp32 eager: {base.step_seconds / tuned.step_seconds:.2f}x (target >= 1.5x); "
          f"peak {base.peak_memory_bytes / 2**20:.0f} -> {tuned.peak_memory_bytes / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
