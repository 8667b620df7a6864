"""Write a whole file or nothing: temp file in the same directory, fsync, rename, fsync the directory.

A reader (another process, a resumed run, a browser) never sees half a file, and a crash
mid-write leaves the previous version in place.

Example::

    atomic_write_text(Path("plan.json"), json.dumps(data))
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from glob import escape as glob_escape
from pathlib import Path
from typing import BinaryIO

_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
"""Our temp names: ``.{final name}.{8 mkstemp characters}.tmp``."""
PROCESS_START = time.time()
"""When this process imported the module: a temp file older than this was left by an earlier process."""


def remove_orphan_temps(directory: str | os.PathLike[str], older_than: float | None = None) -> list[Path]:
    """Delete temp files a killed process left in ``directory`` (SIGKILL skips our cleanup).

    Only names of our own pattern, last modified before ``older_than`` (default: this process's
    start), so a save in flight in another live process is never touched.
    """
    cutoff = PROCESS_START if older_than is None else older_than
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        try:
            if _TEMP.match(entry.name) and entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass  # gone already, or not ours to delete: never fail a save over a leftover
    return removed


def _remove_orphans_of(path: Path) -> None:
    """Earlier processes' temp files for this same final name (a SIGKILL mid-write leaves one)."""
    for tmp in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        try:
            if _TEMP.match(tmp.name) and tmp.stat().st_mtime < PROCESS_START:
                tmp.unlink()
        except OSError:
            pass


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` whole when the block ends, or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans_of(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); give it the mode open() would have: 0666 less the umask.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def _umask() -> int:
    try:  # Linux reports it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)  # elsewhere the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_file(path) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
