"""``torchsmith launch``: run a torchsmith command on several processes or nodes, via torchrun."""

from __future__ import annotations

from typing import Literal, Optional, cast

import typer

from torchsmith.cli import app
from torchsmith.cli.common import user_errors


@app.command("launch", context_settings={"allow_interspersed_args": False})
def launch_command(
    command: list[str] = typer.Argument(..., help="The torchsmith command each worker runs, after `--`: "
                                                  "e.g. -- run mlp --steps 100."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="Workers on this machine (one per GPU)."),
    nnodes: str = typer.Option("1", "--nnodes", help="N, or MIN:MAX for an elastic job that goes on with MIN nodes."),
    rdzv_backend: str = typer.Option("c10d", "--rdzv-backend",
                                     help="c10d (TCPStore on one node) or etcd-v2 (an etcd server)."),
    rdzv_endpoint: Optional[str] = typer.Option(
        None, "--rdzv-endpoint", help="HOST:PORT every node reaches. Default: a free port on 127.0.0.1."),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id",
                                          help="Job id, the same on every node of a multi-node job."),
    max_restarts: int = typer.Option(0, "--max-restarts", min=0,
                                     help="Restart the worker group up to R times after a failure."),
    log_dir: Optional[str] = typer.Option(None, "--log-dir",
                                          help="Also write each worker's output to LOG_DIR/<run>/attempt_<n>/<rank>/."),
    run_id: Optional[str] = typer.Option(
        None, "--run-id", help="The run's id, given to every torchrun attempt so a restart resumes its own "
        "checkpoints. Default: a fresh one per launch; pass the same on every node of a multi-node job."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the torchrun command without running it."),
) -> None:
    """Start COMMAND on every worker with torchrun (elastic agent, rendezvous, restarts).

    A restarted worker resumes its own run's newest checkpoint (no --resume needed); SIGTERM makes
    every worker save the step under way, and launch exits 143.

    Example: torchsmith launch --nproc-per-node 2 --max-restarts 3 -- run mlp --steps 200 --checkpoint-dir ckpt
    """
    from torchsmith.cli.child_process import run_forwarding_signals
    from torchsmith.distributed.launch import LaunchConfig, build_command, launch_env, probe_endpoint
    from torchsmith.report.console import console
    from torchsmith.report.dist import render_launch

    if rdzv_backend not in ("c10d", "etcd-v2"):
        with user_errors():
            raise ValueError(f"--rdzv-backend {rdzv_backend!r} is not one of c10d, etcd-v2.")
    with user_errors():
        if run_id is not None:
            from torchsmith.engine.identity import check_run_id

            check_run_id(run_id)
        cfg = LaunchConfig(nproc_per_node=nproc_per_node, nnodes=nnodes,
                           rdzv_backend=cast(Literal["c10d", "etcd-v2"], rdzv_backend),  # checked above
                           rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id, max_restarts=max_restarts, log_dir=log_dir)
        cmd, notes = build_command(cfg, list(command))
        if rdzv_endpoint and rdzv_backend == "c10d" and not dry_run:
            probe_endpoint(rdzv_endpoint)  # a busy port would make torchrun wait forever, silently
        env = launch_env(cmd, run_id)
    render_launch(cmd, notes, console, dry_run=dry_run)
    if not dry_run:
        # SIGTERM to launch (a scheduler, Kubernetes) reaches torchrun, which passes it to the workers:
        # they save the step under way and exit 143; launch then exits 143 too.
        raise typer.Exit(run_forwarding_signals(cmd, env, report_signal=True))
