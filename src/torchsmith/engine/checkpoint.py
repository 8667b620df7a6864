"""Atomic, exact, safe checkpoints for ``run``.

* Atomic: written to a temp file in the same directory, fsynced, then renamed, so a
  crash mid-write never leaves a file that looks complete.
* Exact: model, optimizer, scheduler, every RNG state and the data position, so a
  resumed run continues bit for bit on CPU.
* Safe: loaded with ``torch.load(weights_only=True)`` only. A file holding arbitrary
  pickled objects is refused, never unpickled, and there is no fallback.
"""

from __future__ import annotations

import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchsmith.atomic import atomic_file
from torchsmith.text import first_line

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


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:08d}.pt"


def save_checkpoint(directory: str | os.PathLike, step: int, state: dict[str, Any]) -> Path:
    """Write ``state`` for ``step`` atomically: temp file, fsync, rename, fsync the directory."""
    directory = Path(directory)
    final = checkpoint_path(directory, step)
    with atomic_file(final) as f:
        torch.save({"format_version": FORMAT_VERSION, "step": step, **state}, f)
    return final


def prune_checkpoints(directory: str | os.PathLike, keep_last_k: int | None) -> list[Path]:
    """Delete all but the newest ``keep_last_k`` complete checkpoints; return what was deleted."""
    if keep_last_k is None:
        return []
    old = list_checkpoints(directory)[:-keep_last_k]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True``; raise :class:`CheckpointError` naming the file."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"refused to load {path}: it holds objects other than tensors and plain containers, and "
            f"torchsmith never unpickles arbitrary objects ({first_line(err)}).\n"
            "Tip: if you wrote this file yourself, re-save it with tensors and plain Python types only."
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        size = path.stat().st_size if path.exists() else 0
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupted ({size} bytes): {first_line(err)}.\n"
            "Tip: delete it to resume from the previous checkpoint, or start without --resume."
        ) from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        found = state.get("format_version") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} is not a torchsmith checkpoint of format {FORMAT_VERSION} (found {found!r}).")
    return state


def list_checkpoints(directory: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first (temp files are never listed)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_latest_checkpoint(directory: str | os.PathLike) -> LoadedCheckpoint | None:
    """The newest checkpoint that loads; unusable newer ones are skipped and reported."""
    skipped: list[tuple[Path, str]] = []
    for path in reversed(list_checkpoints(directory)):
        try:
            return LoadedCheckpoint(path, load_checkpoint(path), skipped)
        except CheckpointError as err:
            skipped.append((path, first_line(err)))
    if skipped:
        reasons = "\n".join(f"  {p}: {r}" for p, r in skipped)
        raise CheckpointError(f"no usable checkpoint in {directory}; every one failed to load:\n{reasons}")
    return None
