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

from torchsmith.distributed.checkpoint import DistCheckpointer, DistLoaded, list_steps, marker_run
from torchsmith.distributed.runtime import (
    DistContext,
    any_rank,
    host_group,
    init_from_env,
    mean_over_ranks,
    shard_batch,
)
from torchsmith.engine.dir_lock import DirLock, lock_directory
from torchsmith.engine.identity import CheckpointDirError
from torchsmith.plan import DDP, Plan, Single
from torchsmith.seeding import rng_state


class DistSession:
    def __init__(self, ctx: DistContext, checkpoint_dir: str | os.PathLike | None,
                 keep_last_k: int | None = 3, async_save: bool = False):
        self.ctx = ctx
        self.host_group = host_group()
        """Where host-side flags are agreed (the stop signal): gloo, so no GPU sync (see ``host_group``)."""
        self.checkpointer = (DistCheckpointer(checkpoint_dir, keep_last_k=keep_last_k, async_save=async_save)
                             if checkpoint_dir is not None else None)

    @classmethod
    def from_env(cls, device: torch.device, checkpoint_dir: str | os.PathLike | None,
                 **checkpoint_options: Any) -> DistSession | None:
        ctx = init_from_env(device)
        return cls(ctx, checkpoint_dir, **checkpoint_options) if ctx is not None else None

    def plan(self, plan: Plan) -> Plan:
        if isinstance(plan.parallel, Single) and self.ctx.world_size > 1:
            return plan.replace(parallel=DDP())
        return plan

    def shard(self, batch: Any) -> Any:
        return shard_batch(batch, self.ctx.rank, self.ctx.world_size)

    def agreed(self, value: str | None) -> str | None:
        """Rank 0's ``value`` on every rank (e.g. the run id: nodes launched apart may disagree)."""
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (one all-reduce: a decision taken together)."""
        return any_rank(flag, self.ctx.device)

    # --- checkpoints (engine/run_checkpoints.py adds the run identity around these) -------

    def _checkpointer(self) -> DistCheckpointer:
        if self.checkpointer is None:
            raise RuntimeError("this DistSession has no checkpoint directory; pass checkpoint_dir to use checkpoints.")
        return self.checkpointer

    def existing(self) -> list[Path]:
        """Step directories already in the checkpoint directory, oldest first."""
        return [p for _, p, _ in list_steps(self._checkpointer().root)]

    def owners(self) -> list[str]:
        """The run id of each committed step directory, oldest first."""
        return [marker_run(p) for _, p, ok in list_steps(self._checkpointer().root) if ok]

    def lock_directory(self, run_id: str) -> DirLock | None:
        """Rank 0 holds the checkpoint directory's lock for the job; every rank raises if it is taken."""
        lock, refusal = None, None
        if self.ctx.rank == 0:
            try:
                lock = lock_directory(self._checkpointer().root, run_id)
            except ValueError as err:
                refusal = err
        if self.any_rank(refusal is not None):  # every rank must stop together, or the others hang
            raise refusal or CheckpointDirError(f"--checkpoint-dir {self._checkpointer().root} is in use by "
                                                "another live run (rank 0 names it).")
        return lock

    def clear(self) -> None:
        """``--overwrite``: rank 0 deletes every step directory, once every rank has looked."""
        dist.barrier()
        if self.ctx.rank == 0:
            for p in self.existing():
                shutil.rmtree(p, ignore_errors=True)
        dist.barrier()

    def load_latest(self, step_fn: Any, run_id: str | None = None) -> DistLoaded | None:
        """Model and optimizer are restored in place; ``.state`` holds the rest for ``run``.
        ``run_id``: only that run's steps."""
        return self._checkpointer().load_latest(step_fn.parts, run_id=run_id)

    def save(self, step_fn: Any, step: int, plan: Plan, position: tuple[int, int], epoch_rng: dict,
             identity: dict[str, str] | None = None, prune: bool = True) -> Path:
        """``identity``: run id and fingerprints, stored in every rank's JSON; ``prune=False`` keeps
        every older step this time (the loss is non-finite)."""
        parts = step_fn.parts
        identity = identity or {}
        checkpointer = self._checkpointer()
        checkpointer.run_id = identity.get("run_id", "")
        extras = {
            "scheduler": parts.scheduler.state_dict() if parts.scheduler is not None else None,
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            "rng": rng_state(),  # this rank's: dropout masks differ per rank
            "epoch_rng": epoch_rng,
            "data_position": {"epoch": position[0], "index": position[1]},
            "plan": plan.to_dict(),
            "world_size": self.ctx.world_size,
            **identity,
        }
        keep = checkpointer.keep_last_k
        if not prune:  # a non-finite loss: keep every older good step this time
            checkpointer.keep_last_k = None
        try:
            return checkpointer.save(step, parts, extras)
        finally:
            checkpointer.keep_last_k = keep

    def losses(self, losses: torch.Tensor) -> torch.Tensor:
        """Per-step losses of this rank's slices -> losses of the global batches (one all-reduce)."""
        return mean_over_ranks(losses)

    def finish(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.finish()
