"""The knobs ``tune -- python train.py`` can turn from outside a script, as candidate plan changes.

A subset of the workload search space: the knobs the injection applies (threads, precision as
bf16 autocast, optimizer implementation, DataLoader workers, compile, checkpointing) plus the
backend switches, each with the candidate values its transform registers for this device.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from torchsmith.engine.space import Dimension, search_space
from torchsmith.measure.fingerprint import usable_cores
from torchsmith.plan import Autocast, Backend, CheckpointBlocks, Compile
from torchsmith.transforms.base import DeviceInfo

SCRIPT_KNOBS = ("threads", "precision", "optimizer", "loader", "backend", "compile", "checkpointing")
"""In the order they are tried: cheap process-wide knobs first, compile (slow to start) last."""


def script_space(device: DeviceInfo, *, uses_loader: bool) -> list[Dimension]:
    """Candidate moves per knob for a script on ``device``; loader knobs only when it uses a DataLoader."""
    # The script starts in a fresh process: its threads as written are PyTorch's default there
    # (OMP_NUM_THREADS when set, else the physical cores), whatever this process has set.
    omp = os.environ.get("OMP_NUM_THREADS", "")
    device = replace(device, threads_as_written=int(omp) if omp.isdigit() and int(omp) > 0 else usable_cores())
    by_name = {d.name: d for d in search_space(device)}
    dims: list[Dimension] = []
    for name in SCRIPT_KNOBS:
        if name == "backend":
            backends = _backend_values(device)
            if backends:
                dims.append(Dimension("backend", "backend", tuple(backends), False))
            continue
        d = by_name.get(name)
        if d is None or (name == "loader" and not uses_loader):
            continue
        values = tuple(v for v in d.candidates if _supported(name, v))
        joint = tuple((v, c) for v, c in d.joint if _supported(name, v))
        if values or joint:
            dims.append(replace(d, candidates=values, joint=joint))
    return dims


def _supported(name: str, value: Any) -> bool:
    if name == "precision":
        return isinstance(value, Autocast) and value.dtype == "bfloat16"  # fp16 would need a GradScaler in the loop
    if name == "compile":
        return value == Compile(enabled=True)  # regional compile needs the block layout of a torchsmith model
    if name == "checkpointing":
        return isinstance(value, CheckpointBlocks) and value.every == 1
    return True


def _backend_values(device: DeviceInfo) -> list[Backend]:
    if device.type == "cuda":
        return [Backend(matmul_precision="high"), Backend(cudnn_benchmark=True)]
    return []  # on CPU, fp32 matmul precision only matters with oneDNN bf16 paths: left as written
