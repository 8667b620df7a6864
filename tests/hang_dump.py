"""Wait for a child started in a session of its own; if it hangs, fail with every process's stack.

A torchrun job is a tree: torchsmith launch, torchrun's agent, the workers. When such a job hangs
in a test, "did not finish in 240 s" and the last lines it printed do not say which process waits
for what. tests/conftest.py sets ``PYTHONFAULTHANDLER=1`` for every process a test starts, so
SIGABRT makes a Python process print all its threads' stacks before it dies. On a timeout this
stops the child and every process below it, so that none reacts to another's death, then lets
each take SIGABRT in turn, the deepest first, kills what is left and fails with the dump. It finds them by parent, not
by session: torchrun starts each worker in a session of its own, out of reach of ``killpg``.

Example::

    proc = subprocess.Popen(cmd, ..., start_new_session=True)
    out, err = finish_or_dump(proc, timeout=240)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def finish_or_dump(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of ``proc``; on a timeout, an AssertionError with each process's stack."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    tree = _descendants(proc.pid)
    for pid in tree:  # freeze the job first: a parent would react to its child's death, and move on
        _signal(pid, signal.SIGSTOP)
    for pid in sorted(tree, key=lambda pid: -tree[pid][1]):  # deepest first
        _signal(pid, signal.SIGABRT)  # pending until SIGCONT: the stack is the one where it hung
        _signal(pid, signal.SIGCONT)
        time.sleep(0.5)  # one dump at a time
    time.sleep(1)
    for pid in tree:  # torchrun starts each worker in a session of its own: killpg would miss them
        _signal(pid, signal.SIGKILL)
    out, err = proc.communicate()
    listing = "\n".join(f"  pid {pid} depth {depth}: {cmd}" for pid, (cmd, depth) in sorted(tree.items()))
    raise AssertionError(f"{proc.args} did not finish in {timeout} s. Processes still alive then:\n{listing}\n"
                         f"Their stacks (SIGABRT with PYTHONFAULTHANDLER=1) and the output:\n"
                         f"{(out or '')[-12000:]}\n{(err or '')[-12000:]}")


def _descendants(root: int) -> dict[int, tuple[str, int]]:
    """{pid: (command line, depth)} of ``root`` (depth 0) and every live process below it."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # exited meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents[int(entry.name)] = int(ppid)
            commands[int(entry.name)] = cmdline[:300]

    def depth(pid: int) -> int | None:
        if pid == root:
            return 0
        above = depth(parents[pid]) if pid in parents else None
        return None if above is None else above + 1

    return {pid: (commands[pid], d) for pid in parents if (d := depth(pid)) is not None}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
