"""What ``engine.run`` does differently inside a torchrun worker.

* the plan's ``parallel`` is ``Single()`` by default; under torchrun with more than one
  rank that would train independent replicas, so it becomes ``DDP()``;
* every rank reads the same global batches and trains on its own slice of each;
* checkpoints are DCP step directories (:mod:`torchsmith.distributed.checkpoint`), with this
  rank's RNG states and the (shared) data position;
* the reported losses are the mean over ranks: the loss of the global batch.

Example::

    session = DistSession.from_env(device, checkpoint_dir)   # None outside torchrun
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from torchsmith.distributed.checkpoint import DistCheckpointer, list_steps
from torchsmith.engine.identity import RunIdentity, check_writable
from torchsmith.engine.run_checkpoints import Resumed, refuse_other_runs
from torchsmith.distributed.runtime import DistContext, init_from_env, mean_over_ranks, shard_batch
from torchsmith.seeding import rng_state
from torchsmith.plan import DDP, Plan, Single


class DistSession:
    def __init__(self, ctx: DistContext, checkpoint_dir: str | os.PathLike | None,
                 keep_last_k: int | None = 3, async_save: bool = False):
        self.ctx = ctx
        self.checkpointer = (DistCheckpointer(checkpoint_dir, keep_last_k=keep_last_k, async_save=async_save)
                             if checkpoint_dir is not None else None)

    @classmethod
    def from_env(cls, device: torch.device, checkpoint_dir: str | os.PathLike | None,
                 **checkpoint_options: Any) -> "DistSession | None":
        ctx = init_from_env(device)
        return cls(ctx, checkpoint_dir, **checkpoint_options) if ctx is not None else None

    def plan(self, plan: Plan) -> Plan:
        if isinstance(plan.parallel, Single) and self.ctx.world_size > 1:
            return plan.replace(parallel=DDP())
        return plan

    def shard(self, batch: Any) -> Any:
        return shard_batch(batch, self.ctx.rank, self.ctx.world_size)

    # --- the checkpoint steps of ``run`` (as engine.run_checkpoints.LocalCheckpoints) --------

    def prepare(self, resume: bool, overwrite: bool) -> None:
        """Every rank: the directory is writable and, for a fresh run, holds no other run's steps."""
        root = self.checkpointer.root
        check_writable(root)
        if not resume:
            refuse_other_runs(root, [p for _, p, _ in list_steps(root)], overwrite)
            dist.barrier()  # everyone has looked before rank 0 deletes anything
            if overwrite and self.ctx.rank == 0:
                for _, p, _ in list_steps(root):
                    shutil.rmtree(p, ignore_errors=True)
            dist.barrier()

    def exists(self) -> bool:
        return bool(list_steps(self.checkpointer.root))

    def load(self, step_fn: Any, identity: RunIdentity, force: bool) -> Resumed | None:
        """Model and optimizer are restored in place; ``.state`` holds the rest for ``run``."""
        loaded = self.checkpointer.load_latest(step_fn.parts)
        if loaded is None:
            return None
        state = loaded.state
        identity.check(loaded.path, state.get("workload_fingerprint", ""), state.get("plan_fingerprint", ""), force)
        return Resumed(loaded.path, state, state.get("run_id", ""), loaded.skipped)

    def save(self, step_fn: Any, step: int, plan: Plan, identity: RunIdentity, position: tuple[int, int],
             epoch_rng: dict, prune: bool = True) -> Path:
        parts = step_fn.parts
        self.checkpointer.run_id = identity.run_id
        extras = {
            "scheduler": parts.scheduler.state_dict() if parts.scheduler is not None else None,
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            "rng": rng_state(),  # this rank's: dropout masks differ per rank
            "epoch_rng": epoch_rng,
            "data_position": {"epoch": position[0], "index": position[1]},
            "plan": plan.to_dict(),
            "world_size": self.ctx.world_size,
            "run_id": identity.run_id,
            "workload_fingerprint": identity.workload,
            "plan_fingerprint": identity.plan,
        }
        keep = self.checkpointer.keep_last_k
        if not prune:  # a non-finite loss: keep every older good step this time
            self.checkpointer.keep_last_k = None
        try:
            return self.checkpointer.save(step, parts, extras)
        finally:
            self.checkpointer.keep_last_k = keep

    def losses(self, losses: torch.Tensor) -> torch.Tensor:
        """Per-step losses of this rank's slices -> losses of the global batches (one all-reduce)."""
        return mean_over_ranks(losses)

    def finish(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.finish()
