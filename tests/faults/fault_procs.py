"""Real processes for the fault matrix: ``torchsmith`` and ``torchsmith launch`` as a user starts them.

Each process runs in its own session, so a test can signal exactly it (``send``) and a timeout
kills it and everything it started. Workloads come from tests/distributed (dist_fault_workload:
faults injected from the environment) and tests/faults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hang_dump import finish_or_dump

FAULTS = Path(__file__).resolve().parent
TESTS = FAULTS.parent
REPO = TESTS.parent
FAULT_WORKLOAD = "dist_fault_workload:workload"
"""The tiny mlp of tests/distributed/dist_fault_workload.py (TS_KILL_AT_STEP and friends)."""


def env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(TESTS / "distributed"), str(FAULTS)])
    base = {k: v for k, v in os.environ.items() if k not in ("TORCHSMITH_RUN_ID", "RANK", "WORLD_SIZE")}
    return {**base, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "COLUMNS": "200",
            **extra}


def start(args: list[str], cwd: Path, **extra_env: str) -> subprocess.Popen:
    """``python -m torchsmith ARGS``, output captured, in a session of its own."""
    return subprocess.Popen([sys.executable, "-m", "torchsmith", *map(str, args)], cwd=cwd, env=env(**extra_env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); on timeout every process of the job is killed and the test fails
    with their stacks."""
    out, err = finish_or_dump(proc, timeout)
    return proc.returncode, out, err


def torchsmith(args: list[str], cwd: Path, timeout: float = 300, **extra_env: str) -> tuple[int, str, str]:
    return finish(start(args, cwd, **extra_env), timeout)


def launch(run_args: list[str], cwd: Path, *, max_restarts: int = 0, log_dir: Path, timeout: float = 300,
           **extra_env: str) -> tuple[int, str, str]:
    """``torchsmith launch --nproc-per-node 2 ... -- run RUN_ARGS --json`` on gloo, each rank's output in log_dir."""
    args = ["launch", "--nproc-per-node", "2", "--max-restarts", str(max_restarts), "--log-dir", str(log_dir),
            "--", "run", *map(str, run_args), "--device", "cpu", "--json"]
    return torchsmith(args, cwd, timeout, **extra_env)


def attempts(log_dir: Path, rank: int = 0) -> dict[int, Path]:
    """attempt number -> that attempt's stdout.log of ``rank`` (torchrun's --log-dir layout)."""
    found = {}
    for p in log_dir.glob(f"*/attempt_*/{rank}/stdout.log"):
        found[int(p.parent.parent.name.removeprefix("attempt_"))] = p
    return found


def last_result(log_dir: Path) -> dict:
    """Rank 0's ``run --json`` result of the last attempt."""
    runs = attempts(log_dir)
    assert runs, f"no worker logs in {log_dir}"
    return json.loads(runs[max(runs)].read_text())


def wait_for(predicate, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
