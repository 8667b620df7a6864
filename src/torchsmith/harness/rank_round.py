"""One round of :func:`~torchsmith.harness.compare.measure_plans` across N ranks, under torchrun.

``tune --nproc-per-node N`` measures the job, not one process. Every round starts a torchrun job
(the elastic agent and rendezvous ``launch`` uses; gloo on CPU, NCCL on CUDA) in which each rank
builds every plan from the workload's spec and trains its slice of each global batch, the plans'
steps interleaved as in one process. Then:

* a step's time is the **slowest rank's** (all-reduce MAX after each step): the job waits for it;
* a plan's losses are the **mean over ranks**, the loss of the global batch, and the guard
  compares those; the final parameters are compared whole (FSDP2's shards gathered);
* peak memory is the largest rank's.

A plan whose ``parallel`` is ``Single()`` trains under DDP with PyTorch's defaults, as ``launch``
does (``engine.dist_session``): that is the as-written baseline of a job on N ranks.

Each round is a fresh job, so every round is also a fresh process (``harness.fresh_round``'s
reason). torchrun may restart the job once (``MAX_RESTARTS``): a rank killed mid-round costs a
re-run of the round, not the search. Rank 0 writes the answer.

Example::

    r = rank_round("mlp", [Plan(), Plan(parallel=Zero1())], nproc=2, warmup=2, steps=12, device="cpu")
    r.measurements[1].step_seconds / r.measurements[0].step_seconds if r.measurements else r.error
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.harness.fresh_round import START_SECONDS
from torchsmith.plan import DDP, Plan, Single
from torchsmith.text import first_line

log = logging.getLogger(__name__)

MAX_RESTARTS = 1
"""torchrun restarts a failed round this many times (a killed rank) before the round fails."""
ROUND_FAILED = "the round across ranks failed"
"""How every plan of a round that gave no answer starts its ``error``."""


@dataclass(frozen=True)
class RankRound:
    measurements: list[PlanMeasurement]
    """One per plan, in order; every one with ``error`` set when the round failed."""
    measure_seconds: float
    """Seconds rank 0 spent measuring; the rest of ``wall_seconds`` is the job's start and end."""
    wall_seconds: float
    restarts: int = 0
    """Times torchrun restarted the job before this answer (a rank failed, then the round re-ran)."""
    error: str | None = None
    """Why the round gave no answer (the job failed or timed out); None when it answered."""


def as_run_on_ranks(plan: Plan, world_size: int) -> Plan:
    """The plan each rank trains: ``Single()`` becomes DDP with PyTorch's defaults on several ranks."""
    return plan.replace(parallel=DDP()) if world_size > 1 and isinstance(plan.parallel, Single) else plan


def rank_round(spec: str, plans: list[Plan], *, nproc: int, warmup: int, steps: int, device: str,
               compare_steps: int | None = None, measure_memory: bool = False,
               timeout_s: float = 600.0) -> RankRound:
    """``measure_plans`` of ``plans`` on ``nproc`` ranks, in a fresh torchrun job (module docstring)."""
    from torchsmith.distributed.launch import LaunchConfig, build_command, launch_env

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchsmith-ranks-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(json.dumps({
            "spec": spec, "plans": [p.to_dict() for p in plans], "warmup": warmup, "steps": steps,
            "device": device, "compare_steps": compare_steps, "measure_memory": measure_memory}))
        cmd, _ = build_command(LaunchConfig(nproc_per_node=nproc, max_restarts=MAX_RESTARTS),
                               [str(request), str(answer)], entry=["-m", "torchsmith.harness.rank_round"])
        limit = (timeout_s + START_SECONDS) * (1 + MAX_RESTARTS)
        try:
            proc = subprocess.run(cmd, env=launch_env(cmd), capture_output=True, text=True, timeout=limit)
            why = None if proc.returncode == 0 and answer.exists() else \
                f"torchrun exited {proc.returncode}: {_last_error(proc.stderr)}"
        except subprocess.TimeoutExpired:
            why = f"no answer within {limit:.0f} s (a rank hung or the job is too slow for this budget)"
        wall = time.perf_counter() - began
        if why is not None:
            log.warning("round of %s on %d ranks: %s", spec, nproc, why)
            failed = [PlanMeasurement(p, None, error=f"{ROUND_FAILED}: {why}") for p in plans]
            return RankRound(failed, 0.0, wall, error=why)
        data = json.loads(answer.read_text())
    ms = [PlanMeasurement(**{**m, "plan": plan}) for m, plan in zip(data["measurements"], plans, strict=True)]
    if data["restarts"]:
        log.warning("round of %s on %d ranks: torchrun restarted the job %d time(s) before it answered",
                    spec, nproc, data["restarts"])
    return RankRound(ms, data["measure_seconds"], wall, restarts=data["restarts"])


def _last_error(stderr: str) -> str:
    """The most telling line of a failed job's output: the last one naming an error."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    named = [ln for ln in lines if "Error" in ln or "error" in ln]
    return first_line((named or lines or ["no output"])[-1])


# --- on each rank -----------------------------------------------------------------------


def _slowest_rank(clock: Any) -> Any:
    """A step timer whose reading is the slowest rank's (one all-reduce MAX, outside the step)."""
    import torch
    import torch.distributed as dist

    def timed(plan: Plan, fn: Any) -> float:
        seconds = torch.tensor([clock(plan, fn)], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        return float(seconds.item())

    return timed


def _job_figures(ms: list[PlanMeasurement], compare_steps: int | None) -> list[PlanMeasurement]:
    """Every rank's figures -> the job's: the first error of any rank, losses averaged over ranks
    (and compared again to the reference's), the largest peak. One gather per plan, on every rank."""
    import torch.distributed as dist

    from torchsmith.harness.loss_guard import compare_losses

    gathered: list[list[tuple[list[float], int | None, str | None]]] = []
    for m in ms:
        box: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(box, (m.losses, m.peak_memory_bytes, m.error))
        gathered.append(box)
    out = []
    ref_losses = _mean_losses(gathered[0])
    for m, ranks in zip(ms, gathered, strict=True):
        error = next((e for _, _, e in ranks if e), None)
        if error is not None:
            failed_on = [r for r, (_, _, e) in enumerate(ranks) if e]
            out.append(replace(m, step_seconds=None, error=f"rank {failed_on[0]}: {error}"))
            continue
        losses = _mean_losses(ranks)
        peaks = [p for _, p, _ in ranks if p is not None]
        loss_diff = (compare_losses(losses, ref_losses, steps=compare_steps or len(losses)).rel_diff
                     if ref_losses else m.loss_rel_diff)
        out.append(replace(m, losses=losses, loss_rel_diff=loss_diff, peak_memory_bytes=max(peaks) if peaks else None))
    return out


def _mean_losses(ranks: list[tuple[list[float], int | None, str | None]]) -> list[float]:
    """Step by step mean of the ranks' losses; empty when any rank has none (it failed)."""
    per_rank = [losses for losses, _, _ in ranks]
    if not all(per_rank) or len({len(x) for x in per_rank}) != 1:
        return []
    return [statistics.fmean(step) for step in zip(*per_rank, strict=True)]


def _answer(request: dict[str, Any]) -> dict[str, Any] | None:
    from torchsmith.distributed.runtime import init_from_env, shard_batch, shutdown
    from torchsmith.engine.loop import resolve_device
    from torchsmith.harness.compare import measure_plans, wall_clock
    from torchsmith.workload import load_workload

    ctx = init_from_env(resolve_device(request["device"]))
    if ctx is None:
        raise RuntimeError("harness.rank_round runs under torchrun: RANK and WORLD_SIZE are not set.")
    try:
        plans = [as_run_on_ranks(Plan.from_dict(p), ctx.world_size) for p in request["plans"]]
        began = time.perf_counter()
        ms = measure_plans(load_workload(request["spec"]), plans, warmup=request["warmup"], steps=request["steps"],
                           device=ctx.device, compare_steps=request["compare_steps"],
                           measure_memory=request["measure_memory"], clock=_slowest_rank(wall_clock),
                           shard=lambda batch: shard_batch(batch, ctx.rank, ctx.world_size))
        ms = _job_figures(ms, request["compare_steps"])
        measured = time.perf_counter() - began
    finally:
        shutdown()
    if ctx.rank != 0:
        return None
    return {"measure_seconds": measured, "restarts": ctx.restart,
            "measurements": [{k: v for k, v in asdict(m).items() if k != "plan"} for m in ms]}


def main(argv: list[str]) -> int:
    request_path, answer_path = argv
    answer = _answer(json.loads(Path(request_path).read_text()))
    if answer is not None:
        tmp = Path(answer_path + f".{os.getpid()}")
        tmp.write_text(json.dumps(answer))
        tmp.replace(answer_path)  # whole or absent: the leader never reads half an answer
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
