"""One live writer per checkpoint directory: ``D/.torchsmith.lock``, held with ``flock`` for the run.

A second process into a directory that a live run writes (``--overwrite``, ``--resume`` or a
fresh run) is refused before step 1: deleting or forking a live run's checkpoints would lose
its work. ``flock`` rather than a pid file alone, because the kernel drops the lock when its
holder dies (SIGKILL included), so a crashed run never leaves a stale lock behind; the file's
text (pid, host, run id) only names the holder in the error. Under torchrun, rank 0 holds the
lock for the whole job, and a restarted attempt takes it over from the dead one.

Example::

    lock = lock_directory(Path("ckpt"), run_id)   # CheckpointDirError if a live process holds it
    ...
    lock.release()
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from torchsmith.engine.identity import CheckpointDirError

LOCK_NAME = ".torchsmith.lock"
log = logging.getLogger(__name__)


@dataclass
class DirLock:
    path: Path
    fd: int | None
    """None once released, or where the file system has no ``flock`` (then nothing is held)."""

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock; the file stays, unlocked
            self.fd = None


def lock_directory(directory: Path, run_id: str) -> DirLock:
    """Hold ``directory``'s lock for this process, or raise :class:`CheckpointDirError` naming its holder."""
    path = Path(directory) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            holder = _holder(fd)
            os.close(fd)
            raise CheckpointDirError(
                f"--checkpoint-dir {directory} is in use by another live run ({holder}); a second writer "
                "would delete or fork its checkpoints.\n"
                "Tip: wait for that run to finish (or stop it: SIGTERM saves a checkpoint first), or choose "
                "another --checkpoint-dir.") from None
        os.close(fd)
        log.debug("no flock on %s (%s): the directory is not locked", path, err.strerror)
        return DirLock(path, None)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, run {run_id}, since {time.ctime()}\n".encode())
    return DirLock(path, fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "a process that has not written its pid yet"
