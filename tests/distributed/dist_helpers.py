"""Start torchrun jobs from tests: 2 CPU workers on loopback, killed as a group on timeout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hang_dump import finish_or_dump
from torchsmith.distributed.launch import LaunchConfig, build_command

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def torchrun(entry: list[str], args: list[str], *, max_restarts: int = 0, env: dict[str, str] | None = None,
             timeout: float = 240, log_dir: str | None = None) -> subprocess.CompletedProcess:
    return torchrun_cfg(dict(max_restarts=max_restarts, log_dir=log_dir), entry, args, env=env, timeout=timeout)


def torchrun_cfg(cfg: dict, entry: list[str], args: list[str], *, env: dict[str, str] | None = None,
                 timeout: float = 240) -> subprocess.CompletedProcess:
    cmd, _ = build_command(LaunchConfig(nproc_per_node=2, **cfg), args, entry=entry)
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(HERE)]),
                "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **(env or {})}
    # A new session: a Ctrl-C in the terminal that runs pytest does not reach the job.
    proc = subprocess.Popen(cmd, env=full_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    out, _ = finish_or_dump(proc, timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")
