"""Atomic, exact, safe checkpoints for ``run``.

* Atomic: written to a temp file in the same directory, fsynced, then renamed, so a
  crash mid-write never leaves a file that looks complete.
* Exact: model, optimizer, scheduler, every RNG state and the data position, so a
  resumed run continues bit for bit on CPU.
* Verified: each file has a manifest (``engine/manifest.py``) with its SHA-256, checked
  before ``torch.load``; a file that fails is skipped and named, and the previous one used.
* Safe: loaded with ``torch.load(weights_only=True)`` only. A file holding arbitrary
  pickled objects is refused, never unpickled, and there is no fallback.
* Owned: the manifest records the run that wrote the file; pruning deletes only that run's.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchsmith.atomic import atomic_file, remove_orphan_temps
from torchsmith.engine.manifest import (
    Manifest,
    ManifestError,
    manifest_path,
    read_manifest,
    verify_file,
    write_manifest,
)
from torchsmith.text import first_line, format_bytes

FORMAT_VERSION = 1
_NAME = re.compile(r"^step_(\d{8})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


@dataclass(frozen=True)
class LoadedCheckpoint:
    path: Path
    state: dict[str, Any]
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    """Newer checkpoints that were unusable, with the reason each was skipped."""
    manifest: Manifest | None = None


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:08d}.pt"


def save_checkpoint(directory: str | os.PathLike, step: int, state: dict[str, Any], *, run_id: str = "",
                    workload: str = "", plan: str = "") -> Path:
    """Write ``state`` for ``step`` atomically, then its manifest (SHA-256, run id, fingerprints).

    Orphan temp files left by a killed earlier save into ``directory`` are removed first.
    """
    directory = Path(directory)
    final = checkpoint_path(directory, step)
    remove_orphan_temps(directory)
    what = f"checkpoint {final}"
    try:
        with atomic_file(final) as f:
            torch.save({"format_version": FORMAT_VERSION, "step": step, **state}, f)
        what = f"the manifest of checkpoint {final}"
        write_manifest(final, step, run_id, workload, plan)
    except OSError as err:
        if what.startswith("the manifest"):
            # A file without its manifest cannot be verified, so resume would skip it anyway: delete it
            # (and a stale manifest of an earlier save of this step) to free its space. Older steps are untouched.
            final.unlink(missing_ok=True)
            manifest_path(final).unlink(missing_ok=True)
        free = shutil.disk_usage(directory).free if directory.is_dir() else None
        reason = "the disk is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else err.strerror or str(err)
        raise CheckpointError(
            f"could not write {what}: {reason} ({format_bytes(free)} free); the older checkpoints are intact.\n"
            "Tip: free space or pass a --checkpoint-dir on another disk; --keep-last-k 1 keeps fewer files."
        ) from None
    return final


def prune_checkpoints(directory: str | os.PathLike, keep_last_k: int | None, run_id: str | None = None) -> list[Path]:
    """Delete all but the newest ``keep_last_k`` checkpoints of run ``run_id``; return what was deleted.

    Only files whose manifest names ``run_id`` are candidates: another run's files, and files
    whose manifest is unreadable, are never deleted here. ``run_id=None`` prunes every checkpoint.
    """
    if keep_last_k is None:
        return []
    mine = [p for p in list_checkpoints(directory) if run_id is None or checkpoint_owner(p) == run_id]
    old = mine[:-keep_last_k] if keep_last_k > 0 else mine
    for path in old:
        path.unlink(missing_ok=True)
        manifest_path(path).unlink(missing_ok=True)
    return old


def checkpoint_owner(path: Path) -> str | None:
    """The run id in ``path``'s manifest; None when the manifest is missing or malformed."""
    try:
        return read_manifest(path).run_id
    except ManifestError:
        return None


def remove_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """``--overwrite``: delete every checkpoint and manifest in ``directory`` (nothing else)."""
    gone = list_checkpoints(directory)
    for path in gone:
        path.unlink(missing_ok=True)
    for path in Path(directory).glob("step_*.pt.json") if Path(directory).is_dir() else []:
        path.unlink(missing_ok=True)
    return gone


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Verify ``path`` against its manifest, then load it with ``weights_only=True``.

    Raises :class:`CheckpointError` naming the file: no manifest, wrong size or SHA-256, a pickle
    that holds more than tensors and plain containers, or not a torchsmith checkpoint.
    """
    return _load_verified(Path(path))[0]


def _load_verified(path: Path) -> tuple[dict[str, Any], Manifest]:
    try:
        manifest = read_manifest(path)
        verify_file(path, manifest)
    except ManifestError as err:
        raise CheckpointError(str(err)) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"refused to load {path}: it holds objects other than tensors and plain containers, and "
            f"torchsmith never unpickles arbitrary objects ({_plain(first_line(err))}).\n"
            "Tip: if you wrote this file yourself, re-save it with tensors and plain Python types only."
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        size = path.stat().st_size if path.exists() else 0
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupted ({size} bytes): {_plain(first_line(err))}.\n"
            "Tip: delete it to resume from the previous checkpoint, or start without --resume."
        ) from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        found = state.get("format_version") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} is not a torchsmith checkpoint of format {FORMAT_VERSION} (found {found!r}).")
    if state.get("step") != manifest.step:
        raise CheckpointError(f"{path} holds step {state.get('step')!r} but its manifest and name say {manifest.step}.")
    return state, manifest


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(text: str) -> str:
    """torch colours parts of its unpickling errors with ANSI escapes; a message we show has none."""
    return _ANSI.sub("", text)


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first (temp files are never listed)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_latest_checkpoint(directory: str | os.PathLike,
                           accept: Callable[[Path, dict[str, Any]], None] | None = None) -> LoadedCheckpoint | None:
    """The newest checkpoint that verifies and loads; unusable newer ones are skipped and reported.

    ``accept(path, state)`` may raise :class:`CheckpointError` to skip a checkpoint that loads
    but does not fit (e.g. missing keys) and fall back to the previous one.
    """
    skipped: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(directory)):
        try:
            state, manifest = _load_verified(path)
            if accept is not None:
                accept(path, state)
            return LoadedCheckpoint(path, state, skipped, manifest)
        except CheckpointError as err:
            skipped.append((path, first_line(err)))
    if skipped:
        reasons = "\n".join(f"  {p}: {r}" for p, r in skipped)
        raise CheckpointError(f"no usable checkpoint in {directory}; every one failed to load:\n{reasons}")
    return None
