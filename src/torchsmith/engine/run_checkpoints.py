"""The checkpoint steps of ``run``: prepare the directory, resume, save and prune.

One process writes ``step_*.pt`` files (``engine/checkpoint.py``); under torchrun the
distributed session writes DCP step directories instead, behind the same three calls
(``prepare``, ``load``, ``save``), so ``run`` reads the same either way.

Example::

    ckpt = LocalCheckpoints(Path("ckpt"), keep_last_k=3)
    ckpt.prepare(resume=False, overwrite=False)      # before step 1: writable, not another run's
    loaded = ckpt.load(step_fn, identity, force=False)
    path = ckpt.save(step_fn, 10, plan, identity, (0, 10), epoch_rng, prune=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchsmith.engine.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_latest_checkpoint,
    prune_checkpoints,
    remove_checkpoints,
    save_checkpoint,
)
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


def refuse_other_runs(directory: Path, found: list[Any], overwrite: bool) -> None:
    """A fresh run refuses a directory holding checkpoints unless told to ``--overwrite`` them."""
    if found and not overwrite:
        raise CheckpointDirError(
            f"--checkpoint-dir {directory} already holds {len(found)} checkpoint(s) "
            f"(newest {Path(str(found[-1])).name}) "
            "and this run was not started with --resume.\n"
            "Tip: pass --resume to continue that run, --overwrite to delete its checkpoints and start over, "
            "or choose an empty --checkpoint-dir.")


class LocalCheckpoints:
    """One process's checkpoints: ``step_*.pt`` files with manifests in ``directory``."""

    def __init__(self, directory: Path, keep_last_k: int | None):
        if keep_last_k is not None and keep_last_k < 1:
            raise ValueError(f"keep_last_k must be >= 1 or None (keep all), found {keep_last_k}.")
        self.directory = Path(directory)
        self.keep_last_k = keep_last_k

    def prepare(self, resume: bool, overwrite: bool) -> None:
        """Before step 1: the directory is writable, and a fresh run does not mix with another's files."""
        check_writable(self.directory)
        if not resume:
            refuse_other_runs(self.directory, list_checkpoints(self.directory), overwrite)
            if overwrite:
                remove_checkpoints(self.directory)

    def exists(self) -> bool:
        return bool(list_checkpoints(self.directory))

    def load(self, step_fn: Step, identity: RunIdentity, force: bool) -> Resumed | None:
        """The newest checkpoint that verifies, holds every key and fits the model; None if none."""

        def accept(path: Path, state: dict[str, Any]) -> None:
            missing = [k for k in REQUIRED if k not in state]
            if missing:
                raise CheckpointError(f"{path} lacks {', '.join(map(repr, missing))}: not a complete checkpoint.")
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


class DistCheckpoints:
    """Under torchrun: the session's DCP step directories, with the same identity rules."""

    def __init__(self, session: Any):
        self.session = session
        self.directory = Path(session.checkpointer.root)

    def prepare(self, resume: bool, overwrite: bool) -> None:
        check_writable(self.directory)  # every rank: the directory may be on a node-local disk
        if not resume:
            refuse_other_runs(self.directory, self.session.existing(), overwrite)
            if overwrite:
                self.session.clear()

    def load(self, step_fn: Step, identity: RunIdentity, force: bool) -> Resumed | None:
        loaded = self.session.load_latest(step_fn)  # model and optimizer restored in place
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
