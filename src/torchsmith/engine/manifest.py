"""The manifest beside each checkpoint file: who wrote it, and the SHA-256 it must still have.

``step_00000010.pt`` is written first, then ``step_00000010.pt.json``::

    {"format_version": 1, "file": "step_00000010.pt", "step": 10, "bytes": 12345,
     "sha256": "...", "run_id": "3f2a...", "workload": "sha256 of the workload", "plan": "sha256 of the plan"}

* ``sha256``/``bytes``: a flipped bit or a truncated copy is caught before ``torch.load``.
* ``run_id``: pruning only ever deletes the files of the run that wrote them.
* ``workload``/``plan``: fingerprints compared on ``--resume`` (see ``engine/identity.py``).

A checkpoint without a manifest (e.g. a crash between the two renames) cannot be verified,
so it is skipped on resume, as a corrupted one is.

Example::

    m = read_manifest(Path("ckpt/step_00000010.pt"))
    verify_file(Path("ckpt/step_00000010.pt"), m)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from torchsmith.atomic import atomic_write_text

MANIFEST_VERSION = 1
_SHA = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(RuntimeError):
    """A manifest that is missing or malformed, or a file that no longer matches it; names the file."""


@dataclass(frozen=True)
class Manifest:
    file: str
    step: int
    bytes: int
    sha256: str
    run_id: str
    workload: str = ""
    """Fingerprint of the workload (model architecture, optimizer, seed, name); "" when unknown."""
    plan: str = ""
    """Fingerprint of the plan as the user gave it; "" when unknown."""
    format_version: int = MANIFEST_VERSION


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(path: Path, step: int, run_id: str, workload: str = "", plan: str = "") -> Manifest:
    """Hash the finished ``path`` and write its manifest atomically."""
    m = Manifest(file=path.name, step=step, bytes=path.stat().st_size, sha256=sha256_file(path),
                 run_id=run_id, workload=workload, plan=plan)
    atomic_write_text(manifest_path(path), json.dumps(asdict(m)) + "\n")
    return m


def read_manifest(path: Path) -> Manifest:
    """Parse and validate the manifest of checkpoint ``path``; :class:`ManifestError` on anything else."""
    file = manifest_path(path)
    try:
        raw = json.loads(file.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path} has no manifest ({file.name}), so its SHA-256 cannot be verified.\n"
                            "Tip: it was not written by this torchsmith, or the save was interrupted; "
                            "delete it to use the previous checkpoint.") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ManifestError(f"manifest {file} is unreadable ({type(err).__name__}).\n"
                            "Tip: delete the checkpoint and its manifest to use the previous one.") from None
    if not isinstance(raw, dict):
        raise ManifestError(f"manifest {file} is not a JSON object (found {type(raw).__name__}).")
    types = {"file": str, "step": int, "bytes": int, "sha256": str, "run_id": str, "workload": str, "plan": str,
             "format_version": int}
    unknown = sorted(set(raw) - set(types))
    missing = sorted({"file", "step", "bytes", "sha256", "run_id", "format_version"} - set(raw))
    bad = [k for k, t in types.items() if k in raw and (type(raw[k]) is not t)]
    if unknown or missing or bad:
        what = (f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}" if missing
                else f"{bad[0]!r} is {type(raw[bad[0]]).__name__}, expected {types[bad[0]].__name__}")
        raise ManifestError(f"manifest {file} is malformed: {what}.\n"
                            "Tip: delete the checkpoint and its manifest to use the previous one.")
    m = Manifest(**raw)
    if m.format_version != MANIFEST_VERSION:
        raise ManifestError(f"manifest {file} has format_version {m.format_version}; this torchsmith reads "
                            f"{MANIFEST_VERSION}.")
    named = re.match(r"^step_(\d+)\.pt$", path.name)
    if (m.file != path.name or m.bytes < 0 or m.step < 0 or not _SHA.match(m.sha256)
            or (named is not None and int(named.group(1)) != m.step)):
        raise ManifestError(f"manifest {file} does not describe {path.name} (file {m.file!r}, step {m.step}, "
                            f"{m.bytes} bytes, sha256 {m.sha256[:16]!r}).")
    return m


def verify_file(path: Path, m: Manifest) -> None:
    """Raise :class:`ManifestError` unless ``path`` has the size and SHA-256 its manifest records."""
    try:
        size = os.stat(path).st_size
    except OSError as err:
        raise ManifestError(f"checkpoint {path} cannot be read ({err.strerror}).") from None
    digest = sha256_file(path) if size == m.bytes else None
    if size != m.bytes or digest != m.sha256:
        found = f"{size} bytes" + (f", sha256 {digest[:16]}..." if digest else "")
        raise ManifestError(
            f"checkpoint {path} is truncated or corrupted: {found}, its manifest records {m.bytes} bytes, "
            f"sha256 {m.sha256[:16]}....\nTip: the file changed after it was written (a bit flip, a partial "
            "copy); delete it to resume from the previous checkpoint.")
