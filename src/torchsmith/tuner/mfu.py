"""MFU of the as-written and the tuned plan, each against the measured matmul peak of its own dtype."""

from __future__ import annotations

import torch

from torchsmith.harness.run_metrics import flops_per_step, matmul_dtype
from torchsmith.measure.peak import checked_mfu
from torchsmith.plan import Plan
from torchsmith.workload import Workload


def tuned_mfu(workload: Workload, device: torch.device, baseline_seconds: float | None, best_seconds: float | None,
              plan: Plan) -> tuple[float | None, float | None]:
    """``(baseline MFU, tuned MFU)``; None where a step time or the FLOP count is unknown.

    A bf16 plan is measured against the bf16 peak: counting it against the fp32 peak would
    credit the plan with the hardware's faster dtype, not with using it well.
    """
    flops = flops_per_step(workload, device)

    def of(seconds: float | None, p: Plan) -> float | None:
        if not flops or not seconds:
            return None
        # At the plan's own thread count and dtype; None rather than a figure above 100%.
        return checked_mfu(flops, seconds, device.type, matmul_dtype(p), threads=p.threads.intra_op)[0]

    return of(baseline_seconds, Plan()), of(best_seconds, plan)
