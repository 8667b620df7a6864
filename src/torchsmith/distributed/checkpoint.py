"""Distributed checkpoints with ``torch.distributed.checkpoint`` (DCP), one directory per step.

Layout of ``ROOT/step_00000040/``::

    __0_0.distcp ...    tensors: model and optimizer state (DCP; each rank writes its shards)
    .metadata           DCP's index, written by rank 0 when every rank's data is written
    rank_00000.json     per rank: RNG states, data position, the optimizer's non-tensor values
    COMMITTED           written last, by rank 0, after a barrier: the directory is complete

* A directory without ``COMMITTED`` is a save that was interrupted: resume ignores it and
  reports it, and picks the newest committed step.
* ``keep_last_k``: after a commit, rank 0 (alone) deletes older step directories.
* Nothing arbitrary is unpickled: DCP holds tensors only (DCP loads non-tensor values with
  unpickling enabled, so none are given to it), the tensors load with ``weights_only=True``,
  and DCP's ``.metadata`` pickle is read through an allowlist of its own classes
  (:mod:`torchsmith.distributed.safe_metadata`); the rest is JSON.
* Owned: the ``COMMITTED`` marker names the run; ``keep_last_k`` deletes only that run's steps.
* Async save: DCP writes in a background thread on a separate gloo group; the commit happens
  at the next save or at :func:`finish`, on every rank at the same point.

Example::

    saver = DistCheckpointer("ckpt", keep_last_k=3)
    saver.save(step, parts, extras)               # every rank, same step
    loaded = saver.load_latest(parts)             # every rank; None when there is none
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from torchsmith.atomic import atomic_write_text
from torchsmith.distributed.safe_metadata import MetadataRefusedError, SafeFileSystemReader, load_metadata
from torchsmith.transforms.parts import StepParts

MARKER = "COMMITTED"
_STEP = re.compile(r"^step_(\d{8})$")
_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


class DistCheckpointError(RuntimeError):
    """A distributed checkpoint that cannot be used; the message names the directory."""


@dataclass(frozen=True)
class DistLoaded:
    path: Path
    state: dict[str, Any]
    """This rank's JSON extras (step, data position, RNG); model and optimizer are already loaded."""
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    """Newer step directories that were incomplete, with the reason."""


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def list_steps(root: str | os.PathLike) -> list[tuple[int, Path, bool]]:
    """(step, directory, committed) for every step directory, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP.match(p.name)) and p.is_dir()]
    return [(s, p, (p / MARKER).is_file()) for s, p in sorted(found)]


class DistCheckpointer:
    """Save and resume one run's checkpoints in ``root``; every rank holds one, with the same arguments."""

    def __init__(self, root: str | os.PathLike, *, keep_last_k: int | None = 3, async_save: bool = False):
        if keep_last_k is not None and keep_last_k < 1:
            raise ValueError(f"keep_last_k must be >= 1 or None (keep all), found {keep_last_k}.")
        self.root = Path(root)
        self.keep_last_k = keep_last_k
        self.async_save = async_save
        self._pending: tuple[Any, int, dict[str, Any]] | None = None
        self._async_group = None
        self.run_id = ""
        """Set by the session: this run's id, recorded in each marker; pruning keeps other runs' steps."""

    # --- save -------------------------------------------------------------------------

    def save(self, step: int, parts: StepParts, extras: dict[str, Any]) -> Path:
        """Write ``step`` on every rank; returns its directory (committed at once unless async).

        ``extras`` is this rank's plain data (JSON types and tensors, which become lists).
        """
        self.finish()  # one save in flight at most: commit the previous one first
        path = step_dir(self.root, step)
        if dist.get_rank() == 0:
            # Leftovers of an interrupted save of this step are cleared before anyone writes.
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
        # Every rank waits for that: dcp.save's writer creates the directory on each rank before its
        # first collective, and once raced rank 0's mkdir here (FileExistsError in CI).
        dist.barrier()
        tensors, optim_plain = _split(_state_dict(parts))
        extras = {**extras, "step": step, "optim_plain": optim_plain}
        if self.async_save:
            if self._async_group is None:
                # The background writer's collectives must not share a group with training's.
                self._async_group = dist.new_group(backend="gloo")
            future = dcp.async_save(tensors, checkpoint_id=str(path), process_group=self._async_group)
            self._pending = (future, step, extras)
        else:
            dcp.save(tensors, checkpoint_id=str(path))
            self._commit(step, extras)
        return path

    def finish(self) -> None:
        """Wait for an async save in flight and commit it (every rank, at the same point)."""
        if self._pending is not None:
            future, step, extras = self._pending
            self._pending = None
            future.result()
            self._commit(step, extras)

    def _commit(self, step: int, extras: dict[str, Any]) -> None:
        path = step_dir(self.root, step)
        rank = dist.get_rank()
        # Each rank hashes the tensor files it wrote (in parallel, files already in the page cache).
        files = {f.name: file_digest(f) for f in sorted(path.glob(f"__{rank}_*.distcp"))}
        _write_json(path / f"rank_{rank:05d}.json", _plain({**extras, "files": files}))
        dist.barrier()  # sync point: every rank's data and JSON are on disk before the marker
        if rank == 0:
            commit(path, {"step": step, "world_size": dist.get_world_size(), "time": time.time(), "run_id": self.run_id,
                          "files": {".metadata": file_digest(path / ".metadata")}})
            self._retain()
        dist.barrier()  # nobody starts the next save (or exits) while rank 0 still deletes

    def _retain(self) -> None:
        """Rank 0 only: keep the newest ``keep_last_k`` committed steps; drop what is older."""
        if self.keep_last_k is None:
            return
        steps = list_steps(self.root)
        committed = [s for s, _, ok in steps if ok]
        if len(committed) <= self.keep_last_k:
            return
        oldest_kept = committed[-self.keep_last_k]
        for s, p, ok in steps:
            # Another run's committed steps are never ours to delete (a fresh run refuses such a
            # directory unless --overwrite cleared it, so this only guards against surprises).
            if s < oldest_kept and (not ok or marker_run(p) == self.run_id):
                shutil.rmtree(p, ignore_errors=True)

    # --- load -------------------------------------------------------------------------

    def load_latest(self, parts: StepParts, run_id: str | None = None) -> DistLoaded | None:
        """Load the newest committed step into ``parts`` (every rank); None if there is none.
        ``run_id``: only that run's steps (a restarted attempt resumes its own run)."""
        skipped = [(p, f"incomplete: no {MARKER} marker (the save was interrupted)")
                   for s, p, ok in reversed(list_steps(self.root)) if not ok]
        committed = [(s, p) for s, p, ok in list_steps(self.root) if ok]
        if run_id is not None:
            skipped += [(p, f"written by run {marker_run(p)!r}, not by this run {run_id}")
                        for s, p in committed if marker_run(p) != run_id]
            committed = [(s, p) for s, p in committed if marker_run(p) == run_id]
        # Rank 0 chooses the newest committed step whose files match their recorded SHA-256,
        # everyone follows: all ranks must load the same step. -2: there were some, none good.
        corrupt: list[tuple[Path, str]] = []
        chosen = -1
        if dist.get_rank() == 0:
            for s, p in reversed(committed):
                reason = verify_step(p)
                if reason is None:
                    chosen = s
                    break
                corrupt.append((p, reason))
            chosen = -2 if chosen < 0 and corrupt else chosen
        choice = torch.tensor([chosen], device=parts.device)
        dist.broadcast(choice, src=0)
        if int(choice) == -2:
            listed = "".join(f"\n  {p}: {why}" for p, why in corrupt) or " (rank 0 lists them)"
            raise DistCheckpointError(f"no usable checkpoint in {self.root}; every committed step failed its "
                                      f"checksum:{listed}\nTip: start a fresh run in a new --checkpoint-dir.")
        if int(choice) < 0:
            return None
        step = int(choice)
        path = step_dir(self.root, step)
        skipped = sorted([(p, why) for p, why in skipped + corrupt if _step_number(p) > step],
                         reverse=True)
        tensors, plain_template = _split(_state_dict(parts))
        try:
            # Checked here first: inside dcp.load a refusal comes back wrapped in a CheckpointException.
            load_metadata(path / ".metadata")
        except MetadataRefusedError as err:
            raise DistCheckpointError(str(err)) from None
        dcp.load(tensors, storage_reader=SafeFileSystemReader(str(path)))
        mine = _read_rank_json(path, dist.get_rank())
        optim_plain = {}
        for rank_file in sorted(path.glob("rank_*.json")):  # ZeRO-1: each rank saved its own groups
            optim_plain.update(json.loads(rank_file.read_text())["optim_plain"])
        optim: dict[str, Any] = {k: v for k, v in tensors.items() if k.startswith("optim.")}
        for key, template in plain_template.items():
            if key in optim_plain:
                value = optim_plain[key]
                optim[key] = tuple(value) if isinstance(template, tuple) else value
            else:
                optim[key] = template
        model_sd: dict[str, Any] = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
        set_model_state_dict(_inner(parts.model), model_sd)
        set_optimizer_state_dict(_inner(parts.model), _local_optimizer(parts),
                                 {k[len("optim."):]: v for k, v in optim.items()}, options=_FLAT)
        return DistLoaded(path, mine, skipped)


def verify_step(path: Path) -> str | None:
    """Why the committed step ``path`` is unusable (a file whose size or SHA-256 differs from the one
    recorded at commit, naming it), or None. Steps committed before hashes were recorded pass."""
    try:
        records = dict(json.loads((path / MARKER).read_text()).get("files", {}))
        for rank_file in sorted(path.glob("rank_*.json")):
            records.update(json.loads(rank_file.read_text()).get("files", {}))
    except (OSError, ValueError, AttributeError, TypeError) as err:
        return f"its {MARKER} or rank_*.json is unreadable ({type(err).__name__})"
    for name, recorded in sorted(records.items()):
        file = path / name
        if not file.is_file():
            return f"{file} is missing"
        found = file_digest(file)
        if list(found) != list(recorded):
            return (f"{file} is truncated or corrupted: {found[0]} bytes, sha256 {found[1][:16]}...; recorded "
                    f"{recorded[0]} bytes, sha256 {str(recorded[1])[:16]}...")
    return None


def file_digest(path: Path) -> list[Any]:
    """[bytes, sha256 hex] of a file."""
    with open(path, "rb") as f:
        return [os.fstat(f.fileno()).st_size, hashlib.file_digest(f, "sha256").hexdigest()]


def commit(path: Path, info: dict[str, Any]) -> None:
    """Write the marker that makes ``path`` a complete checkpoint (last, atomically)."""
    _write_json(path / MARKER, info)


def load_model_tensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The model's full tensors from a step directory, in one process (no group needed).

    >>> weights = load_model_tensors("ckpt/step_00000040")   # doctest: +SKIP
    """
    try:
        meta = SafeFileSystemReader(str(path)).read_metadata()
    except MetadataRefusedError as err:
        raise DistCheckpointError(str(err)) from None
    out = {}
    for key, md in meta.state_dict_metadata.items():
        if key.startswith("model.") and isinstance(md, TensorStorageMetadata):  # not BytesStorageMetadata
            out[key] = torch.empty(md.size, dtype=md.properties.dtype)
    dcp.load(out, storage_reader=SafeFileSystemReader(str(path)), no_dist=True)
    return {k[len("model."):]: v for k, v in out.items()}


# --- helpers ---------------------------------------------------------------------------


def marker_run(path: Path) -> str:
    """The run id recorded in a committed step's marker; "" when there is none."""
    try:
        return str(json.loads((path / MARKER).read_text()).get("run_id", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _local_optimizer(parts: StepParts) -> torch.optim.Optimizer:
    # ZeRO-1: the local optimizer holds exactly the parameters this rank owns, so its
    # state saves under those parameters' names and no two ranks write the same key.
    return getattr(parts.optimizer, "optim", parts.optimizer)


def _state_dict(parts: StepParts) -> dict[str, Any]:
    model = _inner(parts.model)
    state: dict[str, Any] = {f"model.{k}": v for k, v in get_model_state_dict(model).items()}
    optim = get_optimizer_state_dict(model, _local_optimizer(parts), options=_FLAT)
    state.update({f"optim.{k}": v for k, v in optim.items()})
    return state


def _step_number(p: Path) -> int:
    """The step of a ``step_XXXXXXXX`` directory."""
    m = _STEP.match(p.name)
    if m is None:
        raise DistCheckpointError(f"{p} is not a step_XXXXXXXX checkpoint directory.")
    return int(m.group(1))


def _split(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors (for DCP) and plain values (for JSON)."""
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    plain = {k: v for k, v in state.items() if not isinstance(v, torch.Tensor)}
    return tensors, plain


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unplain(value: Any) -> Any:
    if isinstance(value, dict):
        if "__tensor__" in value:
            return torch.tensor(value["__tensor__"], dtype=getattr(torch, value["dtype"]))
        return {k: _unplain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def _read_rank_json(path: Path, rank: int) -> dict[str, Any]:
    """This rank's extras. After the world grew, a new rank takes rank ``rank % saved`` 's RNG
    streams (model and optimizer tensors reshard exactly; RNG streams cannot)."""
    saved = len(list(path.glob("rank_*.json")))
    if saved == 0:
        raise DistCheckpointError(f"{path} is marked complete but holds no rank_*.json: "
                                  f"it was not written by torchsmith.")
    source = rank if (path / f"rank_{rank:05d}.json").is_file() else rank % saved
    state = _unplain(json.loads((path / f"rank_{source:05d}.json").read_text()))
    state["rng_from_rank"] = source
    return state


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data))  # durable before anyone trusts the directory
