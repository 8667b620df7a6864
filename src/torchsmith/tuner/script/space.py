"""The knobs ``tune -- python train.py`` can turn from outside a script, as candidate plan changes.

A subset of the workload search space: the knobs the injection applies (threads, precision as
bf16 autocast, optimizer implementation, DataLoader workers, compile, checkpointing) plus the
backend switches, each with the candidate values its transform registers for this device.

Under ``torchrun --nproc-per-node N`` (N > 1), for a script that builds a
``DistributedDataParallel``, DDP's knobs too: one dimension per field (``ddp.bucket_cap_mb``,
``ddp.gradient_as_bucket_view``, ``ddp.static_graph``, ``ddp.comm_hook``), each value on top of
the DDP fields already won (:func:`with_move`). Few values: every candidate costs pairs of real
multi-process runs.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from torchsmith.engine.space import Dimension, search_space
from torchsmith.measure.fingerprint import usable_cores
from torchsmith.plan import DDP, Autocast, Backend, CheckpointBlocks, Compile, Plan
from torchsmith.transforms.base import DeviceInfo

SCRIPT_KNOBS = ("threads", "precision", "optimizer", "loader", "backend", "ddp", "compile", "checkpointing")
"""In the order they are tried: cheap process-wide knobs first, compile (slow to start) last; the
optimizer moves first when its measured share of the step is large (:mod:`~torchsmith.tuner.script.order`)."""
DDP_KNOBS = ("ddp.bucket_cap_mb", "ddp.gradient_as_bucket_view", "ddp.static_graph", "ddp.comm_hook")
"""The dimensions "ddp" expands to, each named after the outcome key the injection reports it under."""


def script_space(device: DeviceInfo, *, uses_loader: bool, ranks: int = 1, builds_ddp: bool = False,
                 threads_as_written: int | None = None) -> list[Dimension]:
    """Candidate moves per knob for a script on ``device``; loader knobs only when it uses a DataLoader;
    DDP knobs only when the command starts ``ranks`` > 1 processes and the script ``builds_ddp``.

    ``threads_as_written``: the script's thread count as its command and environment start it
    (OMP_NUM_THREADS; torchrun sets 1 per rank), None for PyTorch's default there (the physical
    cores): :func:`~torchsmith.tuner.script.torchrun.threads_as_written`."""
    # The script starts in a fresh process: its threads as written are PyTorch's default there
    # (the caller read OMP_NUM_THREADS from the script's environment), whatever this process has set.
    written = threads_as_written or usable_cores()
    device = replace(device, threads_as_written=written)
    by_name = {d.name: d for d in search_space(device)}
    dims: list[Dimension] = []
    for name in SCRIPT_KNOBS:
        if name == "ddp":
            dims += ddp_dimensions(device) if ranks > 1 and builds_ddp else []
            continue
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


def ddp_dimensions(device: DeviceInfo) -> list[Dimension]:
    """DDP's knobs for a script's own DDP: bucket size both ways from 25 MiB, the two switches, and
    16-bit gradient compression (fp16 on every backend, bf16 only with NCCL, i.e. CUDA). The
    compression is lossy: the loss guard judges it like any lossy knob."""
    fp16, bf16 = DDP(comm_hook="fp16"), DDP(comm_hook="bf16")
    values: dict[str, tuple[DDP, ...]] = {
        "ddp.bucket_cap_mb": (DDP(bucket_cap_mb=100), DDP(bucket_cap_mb=5)),
        "ddp.gradient_as_bucket_view": (DDP(gradient_as_bucket_view=True),),
        "ddp.static_graph": (DDP(static_graph=True),),
        "ddp.comm_hook": (fp16, bf16) if device.type == "cuda" else (fp16,),
    }
    return [Dimension(name, "parallel", values[name], False) for name in DDP_KNOBS]


def with_move(best: Plan, move: dict[str, Any]) -> Plan:
    """``best`` with ``move`` made; a DDP move sets its own field on top of the DDP fields ``best``
    has won already (``bucket_cap_mb=100`` then ``static_graph``: both)."""
    ddp = move.get("parallel")
    if isinstance(ddp, DDP) and isinstance(best.parallel, DDP):
        base = DDP()
        changed = {f.name: getattr(ddp, f.name) for f in fields(DDP) if getattr(ddp, f.name) != getattr(base, f.name)}
        move = {**move, "parallel": replace(best.parallel, **changed)}
    return best.replace(**move)
