"""Run a child command in the foreground, forwarding SIGINT and SIGTERM to it, and pass its exit code on.

``torchsmith run --plan p.json -- python train.py`` and ``torchsmith launch`` (torchrun) are
wrappers: a scheduler or a user signals the wrapper (Kubernetes and ``kill`` reach only its pid,
not its process group), and the child must get the signal too, or it goes on training as an
orphan. The wrapper stays alive until the child exits, so the child can save and clean up.

Exit code: the child's own when it exits; 128 + N when signal N killed it (as a shell reports
it). With ``report_signal``, a child that exits non-zero in its own way after a forwarded signal
(torchrun exits 1 once it has stopped its workers) is reported as 128 + that signal, so a
scheduler still sees the signal.

Ctrl-C in a terminal already sends SIGINT to the whole foreground process group, child
included; SIGINT is then not sent a second time (a second one would interrupt the child's
own clean-up). SIGTERM, which ``kill`` and schedulers send to one pid, is always forwarded.

Example::

    code = run_forwarding_signals(["python", "train.py"], env)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

from torchsmith.cli.common import shell_exit_code

FORWARDED = (signal.SIGINT, signal.SIGTERM)


def run_forwarding_signals(cmd: list[str], env: dict[str, str] | None = None, *, report_signal: bool = False) -> int:
    """Run ``cmd`` to completion with SIGINT/SIGTERM forwarded; its exit code (see the module doc).

    Raises FileNotFoundError when ``cmd[0]`` does not exist (nothing was started).
    """
    proc = subprocess.Popen(cmd, env=env)
    received: list[int] = []
    terminal_sigint = _in_terminal_foreground()

    def forward(signum: int, frame: Any) -> None:
        received.append(signum)
        if proc.poll() is None and not (signum == signal.SIGINT and terminal_sigint):
            proc.send_signal(signum)

    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in FORWARDED} if in_main else {}
    try:
        code = proc.wait()  # PEP 475: retried after each handler runs, so this waits for the child
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code < 0:
        return shell_exit_code(code)
    if code != 0 and received and report_signal:
        return 128 + received[0]
    return code


def _in_terminal_foreground() -> bool:
    """True when this process group owns the terminal, so Ctrl-C reaches the child by itself."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):  # no terminal (a pipe, a scheduler, a test)
        return False
