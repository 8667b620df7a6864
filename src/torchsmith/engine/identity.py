"""Which run a checkpoint belongs to, and whether a resume continues the same training.

* ``run_id``: a fresh id per run, inherited on ``--resume``; pruning deletes only its files.
  ``torchsmith launch`` creates one id per job and gives it to every torchrun attempt
  (``TORCHSMITH_RUN_ID``): a restarted attempt finds its own checkpoints by it and resumes
  them with no flag (``engine/run_checkpoints.py``). torchrun's ``TORCHELASTIC_RESTART_COUNT``
  alone cannot tell: a restart after a membership change keeps the count at 0.
* workload fingerprint: the workload's name and seed, the model's class and every state-dict
  entry's name, shape and dtype, the optimizer's class and hyperparameters. Two workloads
  "of the same shape" still differ by name or hyperparameters.
* plan fingerprint: the plan as the user gave it (before torchrun turns ``Single`` into
  ``DDP``, so an elastic restart on another world size keeps the same fingerprint).

A resume whose fingerprints differ from the checkpoint's is refused (``--force`` overrides).

Example::

    ident = RunIdentity.fresh(workload_fingerprint(w, model, optimizer), plan_fingerprint(plan))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from torchsmith.plan import Plan
from torchsmith.workload import Workload

RUN_ID_ENV = "TORCHSMITH_RUN_ID"
"""The run id ``torchsmith launch`` passes to every attempt of one job (one id per job, not per attempt)."""
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ResumeMismatchError(ValueError):
    """``--resume`` found a checkpoint of a different workload or plan; the message names the file."""


class CheckpointDirError(ValueError):
    """``--checkpoint-dir`` is unusable (a file, read-only) or holds another run's checkpoints."""


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    workload: str
    plan: str

    @classmethod
    def fresh(cls, workload: str, plan: str, run_id: str | None = None) -> RunIdentity:
        """A new run: ``run_id`` when the launcher gave one (see :func:`inherited_run_id`), else a fresh id."""
        return cls(run_id or uuid.uuid4().hex, workload, plan)

    def adopt(self, run_id: str) -> RunIdentity:
        """The same fingerprints under a resumed run's id."""
        return dataclasses.replace(self, run_id=run_id or self.run_id)

    def check(self, path: Path, workload: str, plan: str, force: bool) -> None:
        """Refuse to resume from ``path`` if it was written by another workload or plan."""
        diffs = [f"{what} fingerprint {theirs[:12]} (this run: {ours[:12]})"
                 for what, theirs, ours in (("workload", workload, self.workload), ("plan", plan, self.plan))
                 if theirs and theirs != ours]
        if diffs and not force:
            raise ResumeMismatchError(
                f"refused to resume from {path}: it was written with a different " + " and ".join(diffs) + ".\n"
                "Tip: resume with the workload and --plan that wrote it, start a fresh run in a new "
                "--checkpoint-dir, or pass --force to load it anyway.")


def inherited_run_id() -> str | None:
    """The id of the job this process is an attempt of, or None for a run on its own.

    ``TORCHSMITH_RUN_ID`` (set once per job by ``torchsmith launch``, or by hand: a SLURM job id
    makes a requeued job resume); else, in a worker of a plain ``torchrun --rdzv-id ID``, that
    job id; torchrun's default id ``none`` names no job.
    """
    given = os.environ.get(RUN_ID_ENV, "").strip()
    if given:
        return check_run_id(given, f"{RUN_ID_ENV}=")
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if "RANK" in os.environ and elastic and elastic != "none" and _RUN_ID.match(f"torchrun-{elastic}"):
        return f"torchrun-{elastic}"
    return None


def check_run_id(value: str, where: str = "--run-id ") -> str:
    """``value`` if it is a usable run id (it names files and log lines), else a one-line ValueError."""
    if not _RUN_ID.match(value):
        raise ValueError(f"{where}{value[:80]!r} is not a run id: expected 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit.\n"
                         "Tip: leave it out (torchsmith launch makes one per job) or use e.g. your scheduler's job id.")
    return value


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def plan_fingerprint(plan: Plan) -> str:
    return _digest(plan.to_dict())


def workload_fingerprint(workload: Workload, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """Name, seed, architecture (state-dict names, shapes, dtypes) and optimizer hyperparameters."""
    hyper = {k: v for k, v in optimizer.defaults.items() if isinstance(v, (bool, int, float, str, tuple, type(None)))}
    return _digest({
        "name": _stable_name(workload.name), "seed": workload.seed, "model": type(model).__qualname__,
        "state": [(k, list(v.shape), str(v.dtype)) for k, v in model.state_dict().items()
                  if isinstance(v, torch.Tensor)],
        "optimizer": type(optimizer).__qualname__, "hyper": hyper,
    })


def _stable_name(name: str) -> str:
    """A name taken from a file spec keeps only the file's name: ``./w.py:fn`` and ``/abs/w.py:fn``
    are the same workload, resumed from another directory or spelled another way."""
    module, sep, fn = name.rpartition(":")
    if sep and module.endswith(".py"):
        return f"{Path(module).name}:{fn}"
    return name


def check_writable(directory: str | os.PathLike) -> Path:
    """Create ``directory`` if needed and prove a file can be written there, before any training.

    Raises :class:`CheckpointDirError` naming the directory: a path that is a file, a read-only
    file system, no permission.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointDirError(f"--checkpoint-dir {directory} is a file, not a directory.\n"
                                 "Tip: pass a directory path (it is created if missing).")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory, prefix=".torchsmith-probe-"):
            pass
    except OSError as err:
        raise CheckpointDirError(f"--checkpoint-dir {directory} is not writable: {err.strerror or err}.\n"
                                 "Tip: choose a directory on a writable file system, or fix its permissions; "
                                 "this is checked before step 1 so no training is lost.") from None
    return directory
