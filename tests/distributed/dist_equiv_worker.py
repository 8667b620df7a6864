"""torchrun worker (2 ranks, gloo): strategies against each other, collectives, desync, NaN agreement.

Writes OUT/rank<r>.json; tests/distributed/test_dist_strategies.py asserts on it. One launch serves
every check because starting torchrun and two workers costs most of the time on 2 cores.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import warnings
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from torchsmith.distributed.commcount import CommStats, count_collectives, observe_ddp
from torchsmith.distributed.desync import check_desync
from torchsmith.distributed.runtime import shard_batch, shutdown
from torchsmith.distributed.zero1 import optimizer_state_bytes
from torchsmith.engine.loop import build_step
from torchsmith.plan import DDP, FSDP2, MicroBatching, Plan, Zero1
from torchsmith.workloads.mlp import mlp_loss
from torchsmith.workloads.mlp import workload as mlp_workload

STEPS = 4


def params(step) -> dict[str, torch.Tensor]:
    model = step.model.module if hasattr(step.model, "module") else step.model
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()}


def max_diff(a, b) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


def train(w, plan, batches, rank, world, *, full=False, observe=False, no_sync=True):
    step = build_step(w, plan, torch.device("cpu"))
    if observe:
        observe_ddp(step.model)
    if not no_sync:
        step.parts.no_sync = nullcontext  # control: all-reduce after every micro-batch
    stats = CommStats()
    losses = []
    with count_collectives(stats):
        for b in batches:
            losses.append(step(b if full else shard_batch(b, rank, world)).item())
    return step, stats, losses


@record
def main() -> None:
    out = Path(sys.argv[1])
    faulthandler.dump_traceback_later(90, exit=True)  # a hang fails the test with a traceback
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    w = mlp_workload(seed=0, batch_size=32, train_rows=512, val_rows=64, width=32, depth=2)
    batches = [b for b, _ in zip(w.iter_batches(), range(STEPS), strict=False)]
    res: dict = {"rank": rank, "world": world}

    single, _, _ = train(w, Plan(), batches, rank, world, full=True)
    ddp, ddp_stats, _ = train(w, Plan(parallel=DDP()), batches, rank, world, observe=True)
    zero, zero_stats, _ = train(w, Plan(parallel=Zero1()), batches, rank, world, observe=True)
    fsdp, fsdp_stats, _ = train(w, Plan(parallel=FSDP2()), batches, rank, world)
    fp16, fp16_stats, _ = train(w, Plan(parallel=DDP(comm_hook="fp16")), batches, rank, world)
    p_ddp = params(ddp)
    res["param_bytes"] = sum(p.numel() * p.element_size() for p in p_ddp.values())
    res["diff_ddp_single"] = max_diff(p_ddp, params(single))
    res["diff_zero_ddp"] = max_diff(params(zero), p_ddp)
    res["diff_fsdp_ddp"] = max_diff(params(fsdp), p_ddp)
    res["diff_fp16_ddp"] = max_diff(params(fp16), p_ddp)
    res["opt_bytes"] = {"ddp": optimizer_state_bytes(ddp.optimizer), "zero1": optimizer_state_bytes(zero.optimizer),
                        "fsdp2": optimizer_state_bytes(fsdp.optimizer)}
    res["comm"] = {name: {"calls": dict(s.calls), "bytes": dict(s.bytes), "steps": STEPS}
                   for name, s in [("ddp", ddp_stats), ("zero1", zero_stats), ("fsdp2", fsdp_stats),
                                   ("ddp_fp16", fp16_stats)]}

    # DCP round trip per strategy: save, load into a fresh step, then one more step on both must agree.
    from torchsmith.distributed.checkpoint import DistCheckpointer

    res["resume"] = {}
    for name, plan, trained in [("ddp", Plan(parallel=DDP()), ddp), ("zero1", Plan(parallel=Zero1()), zero),
                                ("fsdp2", Plan(parallel=FSDP2()), fsdp)]:
        saver = DistCheckpointer(out / f"ckpt_{name}", keep_last_k=1)
        saver.save(STEPS, trained.parts, {"data_position": {"epoch": 0, "index": STEPS}})
        fresh = build_step(w, plan, torch.device("cpu"))
        loaded = saver.load_latest(fresh.parts)
        same_after_load = max_diff(params(fresh), params(trained))
        extra = shard_batch(batches[0], rank, world)
        trained(extra), fresh(extra)  # the optimizer state must have come back too
        res["resume"][name] = {"step": loaded.state["step"], "after_load": same_after_load,
                               "after_next_step": max_diff(params(fresh), params(trained))}

    # Accumulation: k micro-batches per step, with and without no_sync.
    for k in (1, 4):
        _, s, _ = train(w, Plan(parallel=DDP(), microbatching=MicroBatching(count=k)), batches, rank, world,
                        observe=True)
        res[f"accum_{k}"] = {"calls": s.calls["all_reduce"], "bytes": s.bytes["all_reduce"]}
    _, s, _ = train(w, Plan(parallel=DDP(), microbatching=MicroBatching(count=4)), batches, rank, world,
                    observe=True, no_sync=False)
    res["accum_4_without_no_sync"] = {"calls": s.calls["all_reduce"], "bytes": s.bytes["all_reduce"]}
    _, s, _ = train(w, Plan(parallel=FSDP2(), microbatching=MicroBatching(count=4)), batches, rank, world)
    res["fsdp_accum_4"] = {"reduce_scatter_calls": s.calls["reduce_scatter"]}

    # Desync: in sync after DDP training; then perturb one parameter on rank 1 only.
    res["desync_clean"] = [m.name for m in check_desync(ddp.model).mismatches]
    if rank == 1:
        with torch.no_grad():
            ddp.model.module.blocks[1].linear.bias[3] += 1e-6
    report = check_desync(ddp.model)
    res["desync_perturbed"] = [{"name": m.name, "ranks": m.ranks} for m in report.mismatches]
    res["desync_checked"] = report.checked

    # NaN in rank 1's loss value only (its gradients stay finite), step 2, skip_step policy.
    # Without the agreement rank 1 alone would replay the step (DDP collectives) and skip it:
    # the ranks' collectives no longer match, and the job hangs until the gloo timeout.
    def nan_on_rank1():
        calls = {"n": 0}

        def loss(model, batch):
            calls["n"] += 1
            value = mlp_loss(model, batch)
            return value + torch.tensor(float("nan")) if rank == 1 and calls["n"] == 2 else value

        w.loss = loss
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step, _, _ = train(w, Plan(parallel=DDP(), nonfinite="skip_step"), batches, rank, world)
        finally:
            w.loss = mlp_loss
        guard = step.parts.nonfinite
        return {"skipped": guard.skipped, "steps": [f.step for f in guard.findings],
                "desync": [m.name for m in check_desync(step.model).mismatches]}

    res["nan"] = nan_on_rank1()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1))
    faulthandler.cancel_dump_traceback_later()
    shutdown()  # a barrier, then exit: nobody leaves while the other still uses the group


if __name__ == "__main__":
    main()
