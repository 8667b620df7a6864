"""What the scale model needs, measured on the ranks of a job without training across them.

Called on every rank of a ``harness.rank_round`` job (the search's first round), after its
measurements:

* **the per-rank step, beside its neighbours**: each rank trains the as-written plan *without* a
  distributed wrap on its own micro-batch (1/N of the global batch), at the same moment as the
  other ranks, so that on a CPU host each sees the cores and memory bandwidth its neighbours take;
  its forward, backward and optimizer medians, the slowest rank's, and the step's peak memory;
* **the same step with bf16 matmuls** (``Plan(precision=BF16Params())``), where bf16 is native:
  the stand-in for FSDP2's bf16 ``MixedPrecisionPolicy``, whose compute the fp32 step cannot show;
* **the model's shape**: the bytes of each parameter tensor and of each repeated block;
* **the collectives**: all-reduce, all-gather, reduce-scatter and broadcast from 4 KiB to twice
  the largest message a strategy sends, on these ranks (``distributed.collective_bench``).

None of it comes from a run of a strategy across the ranks, which is what the prediction is
checked against (``distributed.scale_model``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist

from torchsmith.distributed.collective_bench import BenchConfig, bench_collectives, sizes_up_to
from torchsmith.distributed.runtime import shard_batch
from torchsmith.distributed.scale_model import STRATEGIES, ScaleAssumptions, comm_calls, model_shape
from torchsmith.distributed.zero1 import optimizer_state_bytes
from torchsmith.engine.loop import build_step
from torchsmith.engine.space import device_info
from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.timing import PhaseTimer
from torchsmith.plan import BF16Params, Plan
from torchsmith.transforms.base import TransformError
from torchsmith.workload import Workload

WARMUP, STEPS = 2, 5
PHASES = ("forward", "backward", "optimizer")


def scale_inputs(workload: Workload, device: torch.device, rank: int, world_size: int) -> dict[str, Any]:
    """The scale model's inputs as JSON-ready values (every rank calls it; the answer is the same on all)."""
    step = build_step(workload, Plan(), device)  # Single(): no wrap, no collective, each rank alone
    batches = workload.cycle()
    local = [shard_batch(next(batches), rank, world_size) for _ in range(WARMUP + STEPS + 1)]
    phases = _timed_phases(step, local[:-1])
    with track_peak_memory(device, live=(step.model, step.optimizer)) as mem:
        step(local[-1])
    bf16 = _bf16_phases(workload, device, local[:-1]) if device_info(device).native_bf16 else None
    forward_backward_bf16 = bf16["forward"] + bf16["backward"] if bf16 else -1.0  # -1: not measured (max-reduced)
    slowest = torch.tensor([phases[p] for p in PHASES] + [float(mem.result.peak_bytes), forward_backward_bf16],
                           dtype=torch.float64, device=device)  # NCCL reduces GPU tensors only
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a job's step waits for its slowest rank
    shape = model_shape(step.model, blocks=workload.blocks)
    largest = max(c.nbytes for s in STRATEGIES for c in comm_calls(s, shape, ScaleAssumptions()))
    samples = bench_collectives(BenchConfig(sizes_bytes=sizes_up_to(2 * largest), repeats=5), device)
    values = slowest.tolist()
    return {"profile": {**{f"{p}_seconds": v for p, v in zip(PHASES, values, strict=False)},
                        "peak_bytes": int(values[3]), "optimizer_state_bytes": optimizer_state_bytes(step.optimizer),
                        "bf16_forward_backward_seconds": values[4] if values[4] >= 0 else None},
            "tensor_bytes": list(shape.tensor_bytes), "block_bytes": list(shape.block_bytes),
            "samples": [dataclasses.asdict(s) for s in samples]}


def _timed_phases(step: Any, batches: list[Any]) -> dict[str, float]:
    """Median seconds of each phase over ``batches`` after ``WARMUP`` untimed steps, every rank's
    timed steps started together (a barrier) so that they run side by side."""
    for b in batches[:WARMUP]:
        step(b)
    dist.barrier()
    step.timer = timer = PhaseTimer()
    for b in batches[WARMUP:]:
        step(b)
        timer.end_step()
    step.timer = None
    return timer.summary(warmup=0).median


def _bf16_phases(workload: Workload, device: torch.device, batches: list[Any]) -> dict[str, float] | None:
    """The phases with bf16 matmuls, or None where the workload refuses bf16 parameters. Every rank
    refuses alike (same model), so the barrier inside is reached by all or by none."""
    try:
        step = build_step(workload, Plan(precision=BF16Params()), device)
    except TransformError:
        return None
    return _timed_phases(step, batches)
