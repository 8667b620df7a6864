"""A tiny mlp workload with faults injected from the environment, for the torchrun tests.

TS_KILL_AT_STEP=k     rank TS_FAULT_RANK SIGKILLs itself in step k, on torchrun's first attempt
TS_FAIL_AT_STEP=k     rank TS_FAULT_RANK raises RuntimeError in step k, on every attempt
TS_NAN_AT_STEP=k      rank TS_FAULT_RANK's loss value is NaN in step k (its gradients stay finite)
TS_KILL_IN_SAVE=k     rank 0 SIGKILLs itself while committing step k, on the first attempt
TS_TERM_AT_STEP=k     rank TS_FAULT_RANK sends itself SIGTERM in step k, on the first attempt (a
                      preemption that reaches one rank only)
TS_STEP_SLEEP=s       every rank sleeps s seconds per step (so a test's signal lands a few steps in)
TS_KILL_UNDER_FSDP=1  rank TS_FAULT_RANK SIGKILLs itself in any step of an FSDP2-sharded model, on
                      every attempt (a plan that kills a rank, for the rank-round and tune tests)
"""

from __future__ import annotations

import os
import signal
import time

import torch

from torchsmith.workloads.mlp import mlp_loss
from torchsmith.workloads.mlp import workload as mlp_workload


def _env(name: str) -> int | None:
    return int(os.environ[name]) if os.environ.get(name) else None


def _first_attempt() -> bool:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0


def workload():
    w = mlp_workload(seed=0, batch_size=32, train_rows=512, val_rows=64, width=32, depth=2)
    rank, fault_rank = int(os.environ.get("RANK", 0)), _env("TS_FAULT_RANK") or 0
    calls = {"n": 0}

    def loss(model, batch):
        calls["n"] += 1  # one loss call per step (no micro-batching, no evaluation in these tests)
        step = calls["n"]
        if os.environ.get("TS_STEP_SLEEP"):
            time.sleep(float(os.environ["TS_STEP_SLEEP"]))
        value = mlp_loss(model, batch)
        if rank == fault_rank:
            if os.environ.get("TS_KILL_UNDER_FSDP") and type(model).__name__.startswith("FSDP"):
                os.kill(os.getpid(), signal.SIGKILL)
            if step == _env("TS_KILL_AT_STEP") and _first_attempt():
                os.kill(os.getpid(), signal.SIGKILL)
            if step == _env("TS_TERM_AT_STEP") and _first_attempt():
                os.kill(os.getpid(), signal.SIGTERM)
            if step == _env("TS_FAIL_AT_STEP"):
                raise RuntimeError(f"injected failure on rank {rank} at step {step}")
            if step == _env("TS_NAN_AT_STEP"):
                value = value + torch.tensor(float("nan"))  # the loss value only: no gradient path
        return value

    w.loss = loss
    w.name = "mlp-faults"
    kill_in_save = _env("TS_KILL_IN_SAVE")
    if kill_in_save is not None and rank == 0 and _first_attempt():
        import torchsmith.distributed.checkpoint as ckpt

        original = ckpt.commit

        def commit(path, info):  # the data of this step is on disk; die before the marker
            if info["step"] == kill_in_save:
                os.kill(os.getpid(), signal.SIGKILL)
            original(path, info)

        ckpt.commit = commit
    return w
