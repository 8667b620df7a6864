"""Silence the profiler's native start/stop chatter, and nothing else.

This torch build's Kineto writes ``USDT: ... profiler_start`` / ``profiler_stop`` lines straight to
file descriptor 2 whenever a profiler starts or stops. They tell the user nothing, and every memory
measurement starts one. Only those calls run with fd 2 pointed at /dev/null; Python's own stderr
(warnings, errors) is untouched outside that window.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def native_stderr_silenced() -> Iterator[None]:
    if sys.__stderr__ is None:  # no stderr at all (pythonw): nothing to silence
        yield
        return
    try:
        fd = sys.__stderr__.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        yield  # no real stderr (e.g. embedded): nothing to silence
        return
    sys.__stderr__.flush()
    saved, devnull = os.dup(fd), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)
