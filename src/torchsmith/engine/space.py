"""The search space, read from the transforms' registered metadata."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from torchsmith.engine.registry import registered_transforms
from torchsmith.transforms.base import DeviceInfo, TransformInfo


@dataclass(frozen=True)
class Dimension:
    name: str
    plan_field: str
    candidates: tuple[Any, ...]
    """Values of ``Plan.<plan_field>`` to try, the as-written value excluded."""
    saves_memory: bool
    setup_seconds: float = 0.0
    """One-off cost per candidate (compilation), set aside before measuring it."""
    joint: tuple[tuple[Any, dict[str, Any]], ...] = ()
    """(value, changes to other fields): candidates tried together with a companion change."""

    def moves(self) -> list[dict[str, Any]]:
        """Every candidate as the plan fields it sets: each value alone, then each joint one."""
        return [{self.plan_field: v} for v in self.candidates] + [
            {self.plan_field: v, **companion} for v, companion in self.joint]


def device_info(device: torch.device, ranks: int = 1) -> DeviceInfo:
    """``ranks`` > 1: a job of that many torchrun workers, each with torchrun's default of one
    intra-op thread (``OMP_NUM_THREADS=1``) unless the environment sets it."""
    from torchsmith.measure.fingerprint import machine_fingerprint

    fp = machine_fingerprint()
    native = fp.native_bf16 if device.type == "cpu" else torch.cuda.is_bf16_supported()
    threads = int(os.environ.get("OMP_NUM_THREADS", "1")) if ranks > 1 else None
    return DeviceInfo(type=device.type, cores=fp.available_cores, native_bf16=bool(native),
                      threads_as_written=threads, ranks=ranks)


def search_space(device: DeviceInfo, extra: tuple[TransformInfo, ...] = ()) -> list[Dimension]:
    """Every registered transform that applies to ``device``, in the order the tuner tries them:
    speed knobs before memory knobs, each by its registered rank on this device.

    Candidates never include the as-written value, and a candidate that cannot apply on this
    device is never proposed (e.g. fp16 autocast off CUDA). ``extra`` adds transforms.
    """
    from torchsmith.plan import Plan

    baseline = Plan()
    dims = []
    infos = registered_transforms(extra)
    for info in infos.values():
        if device.type not in info.devices:
            continue
        values = tuple(v for v in info.candidates(device) if v != getattr(baseline, info.plan_field))
        joint = tuple((v, c) for v in values for c in info.companions(device, v))
        if values:
            dims.append(Dimension(info.name, info.plan_field, values, saves_memory=info.trade == "memory",
                                  setup_seconds=info.setup_seconds, joint=joint))
    return sorted(dims, key=lambda d: (d.saves_memory, infos[d.name].rank(device), d.name))
