"""The checkpoint steps of ``run``: prepare the directory, resume, save and prune.

One process writes ``step_*.pt`` files (``engine/checkpoint.py``); under torchrun the
distributed session writes DCP step directories instead, behind the same three calls
(``prepare``, ``load``, ``save``), so ``run`` reads the same either way.

Which checkpoints a run may use:

* ``--resume``: the newest good checkpoint in the directory, whichever run wrote it (the
  fingerprints must match, unless ``--force``).
* a restarted attempt of the same job (torchrun after a failure or a membership change): the
  launcher's run id (``engine/identity.py``) owns checkpoints here, so the attempt resumes the
  newest good one *of that run*, with no flag, and never ``--overwrite`` s them.
* otherwise a fresh run, which refuses a directory holding checkpoints (``--overwrite`` deletes them).

Every writer holds the directory's lock (``engine/dir_lock.py``) for the run, so a second live
process into it is refused, whatever its flags.

Example::

    ckpt = LocalCheckpoints(Path("ckpt"), keep_last_k=3)
    continues = ckpt.prepare(resume=False, overwrite=False, run_id=None)  # before step 1
    loaded = ckpt.load(step_fn, identity, force=False)
    path = ckpt.save(step_fn, 10, plan, identity, (0, 10), epoch_rng, prune=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchsmith.engine.checkpoint import (
    CheckpointError,
    checkpoint_owner,
    list_checkpoints,
    load_latest_checkpoint,
    prune_checkpoints,
    remove_checkpoints,
    save_checkpoint,
)
from torchsmith.engine.dir_lock import DirLock, lock_directory
from torchsmith.engine.identity import CheckpointDirError, RunIdentity, check_writable
from torchsmith.engine.step import Step
from torchsmith.plan import Plan
from torchsmith.seeding import rng_state
from torchsmith.text import first_line

REQUIRED = ("model", "optimizer", "rng", "epoch_rng", "data_position", "step")
"""Keys every checkpoint must hold; one missing them is skipped for the previous one."""


@dataclass
class Resumed:
    path: Path
    state: dict[str, Any]
    """What ``restore`` still needs: step, data position, RNG states, scheduler, scaler."""
    run_id: str
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def refuse_other_runs(directory: Path, found: list[Any], overwrite: bool, run_id: str | None = None) -> None:
    """A fresh run refuses a directory holding checkpoints unless told to ``--overwrite`` them."""
    if found and not overwrite:
        launched = (f" This job's run id {run_id} did not write them, so it is not a restart of that run."
                    if run_id else "")
        raise CheckpointDirError(
            f"--checkpoint-dir {directory} already holds {len(found)} checkpoint(s) "
            f"(newest {Path(str(found[-1])).name}) "
            f"and this run was not started with --resume.{launched}\n"
            "Tip: pass --resume to continue that run, --overwrite to delete its checkpoints and start over, "
            "or choose an empty --checkpoint-dir.")


def continues_run(owners: list[str], run_id: str | None) -> bool:
    """A restarted attempt of the run that wrote checkpoints here: its launcher's run id owns one."""
    return run_id is not None and run_id in owners


class LocalCheckpoints:
    """One process's checkpoints: ``step_*.pt`` files with manifests in ``directory``."""

    def __init__(self, directory: Path, keep_last_k: int | None):
        if keep_last_k is not None and keep_last_k < 1:
            raise ValueError(f"keep_last_k must be >= 1 or None (keep all), found {keep_last_k}.")
        self.directory = Path(directory)
        self.keep_last_k = keep_last_k
        self.lock: DirLock | None = None

    def prepare(self, resume: bool, overwrite: bool, run_id: str | None = None) -> bool:
        """Before step 1: the directory is writable and no other live run's, and a fresh run does not
        mix with another's files. True when this is a restart of the run ``run_id`` that wrote them."""
        check_writable(self.directory)
        self.lock = lock_directory(self.directory, run_id or "unnamed")
        if resume:
            return False
        found = list_checkpoints(self.directory)
        if continues_run([checkpoint_owner(p) or "" for p in found], run_id):
            return True  # the same run restarted: resume it, and never --overwrite its own work
        refuse_other_runs(self.directory, found, overwrite, run_id)
        if overwrite:
            remove_checkpoints(self.directory)
        return False

    def exists(self) -> bool:
        return bool(list_checkpoints(self.directory))

    def load(self, step_fn: Step, identity: RunIdentity, force: bool, own_only: bool = False) -> Resumed | None:
        """The newest checkpoint that verifies, holds every key and fits the model; None if none.
        ``own_only``: only the checkpoints of ``identity.run_id`` (a restarted attempt of that run)."""

        def accept(path: Path, state: dict[str, Any]) -> None:
            missing = [k for k in REQUIRED if k not in state]
            if missing:
                raise CheckpointError(f"{path} lacks {', '.join(map(repr, missing))}: not a complete checkpoint.")
            if own_only and state.get("run_id") != identity.run_id:
                raise CheckpointError(f"{path} belongs to run {state.get('run_id')!r}, not to run {identity.run_id}.")
            identity.check(path, state.get("workload_fingerprint", ""), state.get("plan_fingerprint", ""), force)
            load_model_and_optimizer(step_fn, state, path)

        loaded = load_latest_checkpoint(self.directory, accept)
        if loaded is None:
            return None
        return Resumed(loaded.path, loaded.state, loaded.state.get("run_id", ""), loaded.skipped)

    def save(self, step_fn: Step, step: int, plan: Plan, identity: RunIdentity, position: tuple[int, int],
             epoch_rng: dict, prune: bool) -> Path:
        state = {**local_state(step_fn, plan, position, epoch_rng), "run_id": identity.run_id,
                 "workload_fingerprint": identity.workload, "plan_fingerprint": identity.plan}
        path = save_checkpoint(self.directory, step, state, run_id=identity.run_id,
                               workload=identity.workload, plan=identity.plan)
        if prune:  # never while the loss is non-finite: older good checkpoints must survive a diverged run
            prune_checkpoints(self.directory, self.keep_last_k, run_id=identity.run_id)
        return path

    def finish(self) -> None:
        pass

    def release(self) -> None:
        """The run is over (or failed): another process may write the directory now."""
        if self.lock is not None:
            self.lock.release()


class DistCheckpoints:
    """Under torchrun: the session's DCP step directories, with the same identity rules."""

    def __init__(self, session: Any):
        self.session = session
        self.directory = Path(session.checkpointer.root)
        self.lock: DirLock | None = None

    def prepare(self, resume: bool, overwrite: bool, run_id: str | None = None) -> bool:
        """As :meth:`LocalCheckpoints.prepare`, on every rank; every rank reaches the same answer from
        the same files (``run_id`` is rank 0's), and rank 0 holds the directory's lock for the job."""
        check_writable(self.directory)  # every rank: the directory may be on a node-local disk
        self.lock = self.session.lock_directory(run_id or "unnamed")
        if resume:
            return False
        found = self.session.existing()
        if continues_run(self.session.owners(), run_id):
            return True  # the same run restarted: resume it, and never --overwrite its own work
        refuse_other_runs(self.directory, found, overwrite, run_id)
        if overwrite:
            self.session.clear()
        return False

    def load(self, step_fn: Step, identity: RunIdentity, force: bool, own_only: bool = False) -> Resumed | None:
        # model and optimizer restored in place
        loaded = self.session.load_latest(step_fn, run_id=identity.run_id if own_only else None)
        if loaded is None:
            return None
        state = loaded.state
        identity.check(loaded.path, state.get("workload_fingerprint", ""), state.get("plan_fingerprint", ""), force)
        return Resumed(loaded.path, state, state.get("run_id", ""), loaded.skipped)

    def save(self, step_fn: Step, step: int, plan: Plan, identity: RunIdentity, position: tuple[int, int],
             epoch_rng: dict, prune: bool) -> Path:
        ident = {"run_id": identity.run_id, "workload_fingerprint": identity.workload,
                 "plan_fingerprint": identity.plan}
        return self.session.save(step_fn, step, plan, position, epoch_rng, ident, prune)

    def finish(self) -> None:
        self.session.finish()

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def local_state(step_fn: Step, plan: Plan, position: tuple[int, int], epoch_rng: dict) -> dict[str, Any]:
    parts = step_fn.parts
    return {
        "model": parts.model.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict() if parts.scheduler is not None else None,
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "rng": rng_state(),
        "epoch_rng": epoch_rng,
        "data_position": {"epoch": position[0], "index": position[1]},
        "plan": plan.to_dict(),
    }


def load_model_and_optimizer(step_fn: Step, state: dict[str, Any], path: Path) -> None:
    """Load a single-process checkpoint's model and optimizer; a mismatch is a one-line error naming ``path``."""
    parts = step_fn.parts
    try:
        parts.model.load_state_dict(state["model"])
        parts.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path} does not fit this model and optimizer: {first_line(err)}.\n"
                              "Tip: resume with the workload that wrote it, or start a fresh run.") from None


def restore(step_fn: Step, state: dict[str, Any]) -> tuple[int, tuple[int, int], dict]:
    """Scheduler and scaler from ``state`` (model and optimizer are loaded already); the position."""
    parts = step_fn.parts
    if parts.scheduler is not None and state.get("scheduler") is not None:
        parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler is not None and state.get("scaler") is not None:
        parts.scaler.load_state_dict(state["scaler"])
    pos = state["data_position"]
    return int(state["step"]), (int(pos["epoch"]), int(pos["index"])), state["epoch_rng"]
