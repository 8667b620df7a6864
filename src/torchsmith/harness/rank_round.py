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
reason). Rank 0 writes the answer.

A step that fails on one rank cannot be recorded and stepped past, as in one process: the other
ranks wait in its collectives. So a rank whose step raises (its own error, or the broken connection
of a rank that was killed) writes which plan it was stepping, and exits; torchrun ends the job and
starts it again (``MAX_RESTARTS``), and the new attempt measures every plan but the failed ones,
which come back with that error. A killed rank ends its candidate, never the round.

Example::

    r = rank_round("mlp", [Plan(), Plan(parallel=Zero1())], nproc=2, warmup=2, steps=12, device="cpu")
    r.measurements[1].step_seconds / r.measurements[0].step_seconds if r.measurements else r.error
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from torchsmith.harness.compare import PlanMeasurement
from torchsmith.harness.fresh_round import START_SECONDS
from torchsmith.plan import DDP, Plan, Single
from torchsmith.text import first_line

log = logging.getLogger(__name__)

MAX_RESTARTS = 4
"""torchrun restarts a failed round this many times, each restart leaving out the plans that failed: enough
for every variant of one strategy to fail (FSDP2 has three), each costing one job start."""
STEP_FAILED_EXIT = 3
"""A rank's exit status after it wrote down the plan whose step failed."""
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
    scale_inputs: dict[str, Any] | None = None
    """The scale model's inputs (``harness.scale_inputs``), when the round was asked for them."""
    inputs_seconds: float = 0.0
    """Seconds rank 0 spent measuring ``scale_inputs``: neither steps nor the job's start."""


def as_run_on_ranks(plan: Plan, world_size: int) -> Plan:
    """The plan each rank trains: ``Single()`` becomes DDP with PyTorch's defaults on several ranks."""
    return plan.replace(parallel=DDP()) if world_size > 1 and isinstance(plan.parallel, Single) else plan


def rank_round(spec: str, plans: list[Plan], *, nproc: int, warmup: int, steps: int, device: str,
               compare_steps: int | None = None, measure_memory: bool = False,
               timeout_s: float = 600.0, with_scale_inputs: bool = False,
               max_restarts: int = MAX_RESTARTS) -> RankRound:
    """``measure_plans`` of ``plans`` on ``nproc`` ranks, in a fresh torchrun job (module docstring);
    ``max_restarts`` attempts after the first may each leave out the plans that failed."""
    from torchsmith.distributed.launch import LaunchConfig, build_command

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torchsmith-ranks-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(json.dumps({
            "spec": spec, "plans": [p.to_dict() for p in plans], "warmup": warmup, "steps": steps,
            "device": device, "compare_steps": compare_steps, "measure_memory": measure_memory,
            "scale_inputs": with_scale_inputs}))
        cmd, _ = build_command(LaunchConfig(nproc_per_node=nproc, max_restarts=max_restarts),
                               [str(request), str(answer)], entry=["-m", "torchsmith.harness.rank_round"])
        limit = (timeout_s + START_SECONDS) * (1 + max_restarts)
        code, stderr = _run_job(cmd, limit)
        failed = _read_failures(answer.with_name("failed"))
        said = "; ".join(dict.fromkeys(failed.values())) if failed else _last_error(stderr)
        why = None if code == 0 and answer.exists() else (
            f"no answer within {limit:.0f} s (a rank hung or the job is too slow for this budget)" if code is None
            else f"torchrun exited {code}: {said}")
        wall = time.perf_counter() - began
        if why is not None:
            log.warning("round of %s on %d ranks: %s", spec, nproc, why)
            lost = [PlanMeasurement(p, None, error=f"{ROUND_FAILED}: {why}") for p in plans]
            return RankRound(lost, 0.0, wall, error=why)
        data = json.loads(answer.read_text())
    ms = [PlanMeasurement(**{**m, "plan": plan}) for m, plan in zip(data["measurements"], plans, strict=True)]
    if data["restarts"]:
        log.warning("round of %s on %d ranks: torchrun restarted the job %d time(s) before it answered",
                    spec, nproc, data["restarts"])
    return RankRound(ms, data["measure_seconds"], wall, restarts=data["restarts"], scale_inputs=data["scale_inputs"],
                     inputs_seconds=data["inputs_seconds"])


def _run_job(cmd: list[str], limit: float) -> tuple[int | None, str]:
    """Run torchrun to the end, or kill it and every rank at ``limit`` (exit None)."""
    from torchsmith.distributed.launch import launch_env

    proc = subprocess.Popen(cmd, env=launch_env(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group: a timeout kills the ranks too
    try:
        _, stderr = proc.communicate(timeout=limit)
        return proc.returncode, stderr
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        return None, stderr


def _last_error(stderr: str) -> str:
    """The most telling line of a failed job's output: the last exception a rank printed (``XError: ...``),
    not torchrun's own summary."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"^(\w+\.)*\w*(Error|Exception)\b", ln)]
    return first_line((raised or lines or ["no output"])[-1])


# --- on each rank -----------------------------------------------------------------------


def _slowest_rank(clock: Any, failures: Path, rank: int, device: Any) -> Any:
    """A step timer whose reading is the slowest rank's (one all-reduce MAX, outside the step). A step
    that raises is written down in ``failures`` and this rank exits (module docstring)."""
    import torch
    import torch.distributed as dist

    def timed(plan: Plan, fn: Any) -> float:
        try:
            seconds = torch.tensor([clock(plan, fn)], dtype=torch.float64, device=device)  # NCCL: on the GPU
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        except Exception as err:
            _write_failure(failures, rank, plan, f"rank {rank}: {type(err).__name__}: {first_line(err)}")
            log.error("rank %d: a step of %s failed (%s); ending the attempt so torchrun re-runs the round "
                      "without it", rank, plan.describe(), first_line(err))
            os._exit(STEP_FAILED_EXIT)  # the other ranks wait in collectives this rank will never join
        return float(seconds.item())

    return timed


def _plan_key(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), sort_keys=True)


def _write_failure(failures: Path, rank: int, plan: Plan, error: str) -> None:
    known = _read_failures(failures)
    known.setdefault(_plan_key(plan), error)
    mine = failures.with_name(f"{failures.name}.rank{rank}")
    tmp = mine.with_suffix(".tmp")
    tmp.write_text(json.dumps(known))
    tmp.replace(mine)


def _read_failures(failures: Path) -> dict[str, str]:
    """Plans that failed in earlier attempts (by every rank that saw it), and the first error of each."""
    known: dict[str, str] = {}
    for path in sorted(failures.parent.glob(f"{failures.name}.rank*")):
        if path.suffix != ".tmp":
            for key, error in json.loads(path.read_text()).items():
                known.setdefault(key, error)
    return known


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


def _answer(request: dict[str, Any], failures: Path) -> dict[str, Any] | None:
    from torchsmith.distributed.runtime import init_from_env, shard_batch
    from torchsmith.engine.loop import resolve_device
    from torchsmith.harness.compare import measure_plans, wall_clock
    from torchsmith.workload import load_workload

    ctx = init_from_env(resolve_device(request["device"]))
    if ctx is None:
        raise RuntimeError("harness.rank_round runs under torchrun: RANK and WORLD_SIZE are not set.")
    failed = _read_failures(failures)
    plans = [as_run_on_ranks(Plan.from_dict(p), ctx.world_size) for p in request["plans"]]
    todo = [p for p in plans if _plan_key(p) not in failed]
    if todo[:1] != plans[:1]:
        raise RuntimeError(f"the reference plan failed on the ranks: {failed[_plan_key(plans[0])]}")
    began = time.perf_counter()
    ms = measure_plans(load_workload(request["spec"]), todo, warmup=request["warmup"], steps=request["steps"],
                       device=ctx.device, compare_steps=request["compare_steps"],
                       measure_memory=request["measure_memory"],
                       clock=_slowest_rank(wall_clock, failures, ctx.rank, ctx.device),
                       shard=lambda batch: shard_batch(batch, ctx.rank, ctx.world_size))
    by_key = {_plan_key(m.plan): m for m in _job_figures(ms, request["compare_steps"])}
    measured = time.perf_counter() - began
    inputs = None
    if request.get("scale_inputs"):
        from torchsmith.harness.scale_inputs import scale_inputs

        inputs = scale_inputs(load_workload(request["spec"]), ctx.device, ctx.rank, ctx.world_size)
    inputs_seconds = time.perf_counter() - began - measured
    if ctx.rank != 0:
        return None
    out = [by_key.get(_plan_key(p)) or PlanMeasurement(p, None, error=failed[_plan_key(p)]) for p in plans]
    return {"measure_seconds": measured, "restarts": ctx.restart, "scale_inputs": inputs,
            "inputs_seconds": inputs_seconds,
            "measurements": [{k: v for k, v in asdict(m).items() if k != "plan"} for m in out]}


def main(argv: list[str]) -> NoReturn:
    from torchsmith.distributed.runtime import shutdown

    request_path, answer_path = argv
    answer = _answer(json.loads(Path(request_path).read_text()), Path(answer_path).with_name("failed"))
    if answer is not None:
        tmp = Path(answer_path + f".{os.getpid()}")
        tmp.write_text(json.dumps(answer))
        tmp.replace(answer_path)  # whole or absent: the leader never reads half an answer
    shutdown(0)  # the barrier holds the other ranks until rank 0 has written the answer


if __name__ == "__main__":
    main(sys.argv[1:])
