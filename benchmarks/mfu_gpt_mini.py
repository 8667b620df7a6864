"""MFU of gpt-mini eager fp32: achieved matmul FLOP/s over the machine's measured fp32 peak.

Reference: about 55% of the measured fp32 matmul peak on a 2-core AVX2 CPU.

    PYTHONPATH=src .venv/bin/python benchmarks/mfu_gpt_mini.py [--steps 20]
"""

from __future__ import annotations

import argparse

import torch

import torchsmith
from torchsmith.harness.run_metrics import measure_run_metrics
from torchsmith.measure.peak import machine_peak_flops
from torchsmith.workloads import gpt_mini


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    w = gpt_mini.workload()
    peak = machine_peak_flops("cpu", refresh=True)  # measured now, beside the run
    result = torchsmith.run(w, steps=args.steps)
    m = measure_run_metrics(w, result)
    print(f"gpt-mini eager fp32, {args.steps} steps, threads={torch.get_num_threads()}")
    print(f"  FLOPs per step (fwd+bwd) : {m['flops_per_step'] / 1e9:.2f} GFLOP")
    print(f"  median step              : {result.phases.step_median * 1e3:.1f} ms")
    print(f"  measured fp32 peak       : {peak.flops_per_s / 1e9:.1f} GFLOP/s (load/core {peak.load_per_core})")
    print(f"  MFU                      : {m['mfu']:.1%}   (reference: ~55% on a 2-core AVX2 CPU)")


if __name__ == "__main__":
    main()
