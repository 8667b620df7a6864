"""FLOPs per step, the machine's peak and MFU for a finished run."""

from __future__ import annotations

import os
from typing import Any

import torch

from torchsmith.batch import to_device
from torchsmith.engine.loop import RunResult, resolve_device
from torchsmith.measure.flops import count_flops
from torchsmith.measure.peak import checked_mfu, machine_peak_flops
from torchsmith.plan import Autocast, BF16Params, Plan
from torchsmith.seeding import seed_everything
from torchsmith.workload import Workload


def measure_run_metrics(workload: Workload, result: RunResult) -> dict[str, Any]:
    """FLOPs of one forward+backward (counted on a fresh eager model, so a compiled plan's
    count is the same maths), the measured peak matmul FLOP/s and MFU.

    The optimizer's element-wise update is not counted (FlopCounterMode counts matmul-class
    ops), which is the usual convention for MFU.

    Example::

        metrics = measure_run_metrics(workload, torchsmith.run(workload, steps=20))
        metrics["mfu"]
    """
    device = resolve_device(result.device)
    # Under torchrun each rank computes 1/world of the batch: count one rank's share.
    flops = flops_per_step(workload, device) // int(os.environ.get("WORLD_SIZE", "1"))
    step_s = result.phases.step_median
    # The peak at the plan's own dtype and thread count (the run has reverted its thread setting);
    # checked_mfu re-measures it rather than report above 100%.
    threads = result.plan.threads.intra_op
    if step_s and flops:
        value, peak = checked_mfu(flops, step_s, device.type, matmul_dtype(result.plan), threads=threads)
    else:
        value, peak = None, machine_peak_flops(device.type, matmul_dtype(result.plan), threads=threads)
    return {
        "flops_per_step": flops,
        "peak_flops_per_s": peak.flops_per_s,
        "peak_dtype": peak.dtype,
        "mfu": value,
    }


def matmul_dtype(plan: Plan) -> torch.dtype:
    """The dtype a plan's matmuls run in: the peak its MFU is measured against."""
    if isinstance(plan.precision, BF16Params):
        return torch.bfloat16
    if isinstance(plan.precision, Autocast):
        return torch.bfloat16 if plan.precision.dtype == "bfloat16" else torch.float16
    return torch.float32


def flops_per_step(workload: Workload, device: torch.device) -> int:
    """Matmul-class FLOPs of one forward+backward of ``workload`` as written, on a fresh model."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        seed_everything(workload.seed)
        model = workload.model().to(device)
        batch = to_device(next(iter(workload.iter_batches())), device)
        stats = count_flops(lambda: workload.loss(model, batch).backward())
    return stats.total
