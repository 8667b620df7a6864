"""What the scale model needs, measured on the ranks of a job without training across them.

Called on every rank of a ``harness.rank_round`` job (the search's first round), after its
measurements:

* **the per-rank step, beside its neighbours**: each rank trains the as-written plan *without* a
  distributed wrap on its own micro-batch (1/N of the global batch), at the same moment as the
  other ranks, so that on a CPU host each sees the cores and memory bandwidth its neighbours take;
  its forward, backward and optimizer medians, the slowest rank's, and the step's peak memory;
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
from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.timing import PhaseTimer
from torchsmith.plan import Plan
from torchsmith.workload import Workload

WARMUP, STEPS = 2, 5
PHASES = ("forward", "backward", "optimizer")


def scale_inputs(workload: Workload, device: torch.device, rank: int, world_size: int) -> dict[str, Any]:
    """The scale model's inputs as JSON-ready values (every rank calls it; the answer is the same on all)."""
    step = build_step(workload, Plan(), device)  # Single(): no wrap, no collective, each rank alone
    batches = workload.cycle()
    local = [shard_batch(next(batches), rank, world_size) for _ in range(WARMUP + STEPS + 1)]
    for b in local[:WARMUP]:
        step(b)
    dist.barrier()  # every rank starts its timed steps together: they run side by side
    step.timer = timer = PhaseTimer()
    for b in local[WARMUP:-1]:
        step(b)
        timer.end_step()
    step.timer = None
    phases = timer.summary(warmup=0).median
    with track_peak_memory(device, live=(step.model, step.optimizer)) as mem:
        step(local[-1])
    slowest = torch.tensor([phases[p] for p in PHASES] + [float(mem.result.peak_bytes)], dtype=torch.float64,
                           device=device)  # NCCL reduces GPU tensors only
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a job's step waits for its slowest rank
    shape = model_shape(step.model, blocks=workload.blocks)
    largest = max(c.nbytes for s in STRATEGIES for c in comm_calls(s, shape, ScaleAssumptions()))
    samples = bench_collectives(BenchConfig(sizes_bytes=sizes_up_to(2 * largest), repeats=5), device)
    values = slowest.tolist()
    return {"profile": {**{f"{p}_seconds": v for p, v in zip(PHASES, values, strict=False)},
                        "peak_bytes": int(values[-1]), "optimizer_state_bytes": optimizer_state_bytes(step.optimizer)},
            "tensor_bytes": list(shape.tensor_bytes), "block_bytes": list(shape.block_bytes),
            "samples": [dataclasses.asdict(s) for s in samples]}
