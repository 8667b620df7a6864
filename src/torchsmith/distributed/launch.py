"""Build and run the torchrun (``torch.distributed.run``) command for ``torchsmith launch``.

torchsmith never starts workers itself: torchrun's elastic agent does (c10d or etcd-v2
rendezvous, restarts on failure), and each worker runs ``python -m torchsmith.cli.worker``,
the torchsmith command line under ``@record``.

Example::

    cfg = LaunchConfig(nproc_per_node=2, max_restarts=3)
    cmd, notes = build_command(cfg, ["run", "mlp", "--steps", "100"])
    # [python, -m, torch.distributed.run, --nnodes, 1, --nproc-per-node, 2, ...,
    #  -m, torchsmith.cli.worker, run, mlp, ...]
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Literal

RUN_ID_ENV = "TORCHSMITH_RUN_ID"
"""Read by the workers (``engine/identity.py``); the same name, kept here so this layer imports nothing above."""


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    nproc_per_node: int = 1
    """Workers on this machine (one per GPU, or a few on a CPU)."""
    nnodes: str = "1"
    """``N`` or ``MIN:MAX`` nodes; with a range the job is elastic and goes on with MIN survivors."""
    rdzv_backend: Literal["c10d", "etcd-v2"] = "c10d"
    rdzv_endpoint: str | None = None
    """``HOST:PORT`` every node reaches. None: a free port on 127.0.0.1 (this machine only)."""
    rdzv_id: str | None = None
    """Job id shared by the nodes of one job; None: a fresh one (single node)."""
    max_restarts: int = 0
    """Restarts of the whole worker group after a failure before torchrun gives up."""
    log_dir: str | None = None
    """Also write each worker's stdout/stderr to LOG_DIR/<run>/attempt_<n>/<rank>/."""


WORKER = ["-m", "torchsmith.cli.worker"]


def build_command(cfg: LaunchConfig, args: list[str], entry: list[str] = WORKER) -> tuple[list[str], list[str]]:
    """The torchrun command line for ``torchsmith <args>`` on every worker, and notes to show.

    ``entry`` is what each worker runs: the torchsmith command line, or a script path.
    """
    if cfg.nproc_per_node < 1 or cfg.max_restarts < 0:
        raise ValueError(f"--nproc-per-node must be >= 1 and --max-restarts >= 0; found "
                         f"{cfg.nproc_per_node} and {cfg.max_restarts}.")
    _check_nnodes(cfg.nnodes)
    if not args:
        raise ValueError("nothing to launch.\nTip: torchsmith launch --nproc-per-node 2 -- run mlp --steps 100")
    if cfg.rdzv_backend == "etcd-v2" and importlib.util.find_spec("etcd") is None:
        raise ValueError("--rdzv-backend etcd-v2 needs the python-etcd client, which is not installed.\n"
                         "Tip: pip install 'torchsmith[etcd]'")
    notes = []
    endpoint = cfg.rdzv_endpoint
    if endpoint is None:
        if cfg.rdzv_backend == "etcd-v2":
            raise ValueError("--rdzv-backend etcd-v2 needs --rdzv-endpoint HOST:PORT of the etcd server.\n"
                             "Tip: --rdzv-endpoint 127.0.0.1:2379")
        if cfg.nnodes != "1":
            raise ValueError(f"--nnodes {cfg.nnodes} needs --rdzv-endpoint HOST:PORT that every node reaches; "
                             "without one the rendezvous is on 127.0.0.1, which other machines cannot reach.\n"
                             "Tip: --rdzv-endpoint <node0 address>:29400 on every node, with the same --rdzv-id.")
        # Port 0, as `torchrun --standalone` does: the store binds a free port itself. A port picked
        # here and bound later can be taken in between (any connection's ephemeral port), and torchrun,
        # finding it busy, waits as a client for a rendezvous that never comes: a silent hang.
        endpoint = "127.0.0.1:0"
        notes.append("rendezvous on 127.0.0.1, on a port its store picks: workers connect over loopback. "
                     "PyTorch's TCPStore still listens on all interfaces of that port; firewall it on a shared host.")
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if cfg.rdzv_backend == "c10d" and not _is_loopback(host):
        notes.append(f"warning: the c10d rendezvous store on {endpoint} is unauthenticated: anyone who can reach "
                     "that port can join the job or read and write its keys. Use it only on a trusted network.")
    cmd = [sys.executable, "-m", "torch.distributed.run",
           "--nnodes", cfg.nnodes, "--nproc-per-node", str(cfg.nproc_per_node),
           "--rdzv-backend", cfg.rdzv_backend, "--rdzv-endpoint", endpoint,
           # Nodes of one job must share the id: a fixed default with a shared endpoint, a fresh one on loopback.
           "--rdzv-id", cfg.rdzv_id or (uuid.uuid4().hex[:12] if cfg.rdzv_endpoint is None else "torchsmith"),
           "--max-restarts", str(cfg.max_restarts)]
    if cfg.log_dir:
        cmd += ["--log-dir", cfg.log_dir, "--tee", "3"]
    cmd += [*entry, *args]
    return cmd, notes


def launch_env(cmd: list[str], run_id: str | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment torchrun and its workers get: the job's run id, loopback gloo on one machine.

    ``run_id`` (default: a fresh one) is created once per ``launch`` and is the same in every
    torchrun attempt, so a restarted worker knows the checkpoints of its own run and resumes
    them; a different run into the same directory still refuses (``engine/run_checkpoints.py``).
    """
    env = dict(os.environ if env is None else env)
    env[RUN_ID_ENV] = run_id or uuid.uuid4().hex
    # Gloo picks the interface of the host name by default; on one machine, use loopback.
    if "--rdzv-endpoint" in cmd and _is_loopback(cmd[cmd.index("--rdzv-endpoint") + 1].rsplit(":", 1)[0]):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def run_command(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run torchrun in the foreground; its exit status (0 only if the job finished)."""
    return subprocess.call(cmd, env=launch_env(cmd, env=env))


def _check_nnodes(nnodes: str) -> None:
    """``N`` or ``MIN:MAX`` with 1 <= MIN <= MAX; checked first, so a typo blames --nnodes."""
    parts = nnodes.split(":")
    ok = 1 <= len(parts) <= 2 and all(p.strip().isdigit() for p in parts)
    if ok:
        lo, hi = int(parts[0]), int(parts[-1])
        ok = 1 <= lo <= hi
    if not ok:
        raise ValueError(f"--nnodes {nnodes!r} is not a node count: expected N or MIN:MAX with 1 <= MIN <= MAX.\n"
                         "Tip: --nnodes 2, or --nnodes 1:4 for an elastic job.")


def probe_endpoint(endpoint: str) -> None:
    """Fail at once when a c10d rendezvous endpoint on this machine is already in use.

    torchrun binds the port if it can; if the port is busy it connects as a client and waits,
    with no output, for a rendezvous that whatever holds the port never answers. An address of
    another machine (a node that hosts the store) is not probed.
    """
    import errno

    host, _, port_text = endpoint.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT.\nTip: e.g. 127.0.0.1:29400") from None
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore binds: TIME_WAIT is no conflict
            s.bind((host, port))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise ValueError(
                f"--rdzv-endpoint {endpoint}: port {port} on this machine is already in use, so torchrun "
                "could not host the rendezvous there and would wait for it forever.\n"
                f"Tip: pick a free port, e.g. --rdzv-endpoint {host}:{_free_port()}, or stop what holds it "
                f"(`ss -ltnp | grep :{port}`).") from None
        # EADDRNOTAVAIL and the like: an address of another machine, which hosts the store


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
