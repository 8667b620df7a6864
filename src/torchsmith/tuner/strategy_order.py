"""The order a tune on ranks measures the strategy knob's candidates in: the fastest predicted first.

Under ``--nproc-per-node`` a budget often affords only the first few of the strategy knob's
candidates (``Pace.most_that_fit`` takes them in order). Their written order puts DDP's
settings first and FSDP2 last, so a short tune never reached FSDP2 with bf16 compute, the one
candidate that was a win on gpt-mini (1.17-1.25x the grid's best, docs/scaling.md). So the
candidates are measured in the order the scale model predicts their step at these ranks, from
the inputs the calibration job measured (``harness.scale_inputs``): the per-rank step (and its
bf16-matmul pace where bf16 is native), the model's shape and the collectives on these ranks.

The prediction only orders; the measurement decides. A candidate the model cannot price (PowerSGD:
its compression's compute is not modelled; FSDP2 bf16 without a measured bf16 pace) is placed as
if it ran at the baseline's predicted pace, and ties keep the written order.

Example::

    moves = by_prediction(moves, ranks.scale_inputs, nproc=2, overlap=False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchsmith.distributed.scale_model import ScaleAssumptions, Strategy, predict_step
from torchsmith.plan import DDP, FSDP2, Parallel, Zero1
from torchsmith.tuner.scale_rows import scale_parts

MIB = 2**20


def assumptions(cfg: Parallel, *, overlap: bool) -> tuple[Strategy, ScaleAssumptions] | None:
    """The scale model's strategy and settings for ``cfg``; None where the model cannot price it."""
    if isinstance(cfg, DDP):
        if cfg.comm_hook == "powersgd":
            return None
        return "ddp", ScaleAssumptions(overlap=overlap, bucket_cap_bytes=cfg.bucket_cap_mb * MIB,
                                       gradient_as_bucket_view=cfg.gradient_as_bucket_view,
                                       compressed_gradients=cfg.comm_hook is not None)
    if isinstance(cfg, Zero1):
        return "zero1", ScaleAssumptions(overlap=overlap)
    if isinstance(cfg, FSDP2):
        return "fsdp2", ScaleAssumptions(overlap=overlap, reshard_after_forward=cfg.reshard_after_forward,
                                         bf16_compute=cfg.mixed_precision == "bf16")
    return None


def predicted_seconds(cfg: Parallel, inputs: Mapping[str, Any], *, nproc: int, overlap: bool) -> float | None:
    """The predicted step seconds of ``cfg`` at ``nproc`` ranks; None where the model cannot price it."""
    priced = assumptions(cfg, overlap=overlap)
    if priced is None:
        return None
    profile, shape, links = scale_parts(inputs)
    if priced[1].bf16_compute and profile.bf16_forward_backward_seconds is None:
        return None
    return predict_step(priced[0], nproc, profile=profile, shape=shape, link=links, cfg=priced[1]).predicted_seconds


def by_prediction(moves: list[dict[str, Any]], inputs: Mapping[str, Any], *, nproc: int,
                  overlap: bool) -> list[dict[str, Any]]:
    """``moves`` (each setting ``parallel``) fastest predicted first; the unpriced at DDP's defaults' pace."""
    baseline = predicted_seconds(DDP(), inputs, nproc=nproc, overlap=overlap)
    keys = [predicted_seconds(m["parallel"], inputs, nproc=nproc, overlap=overlap) for m in moves]
    order = sorted(range(len(moves)), key=lambda i: (baseline if keys[i] is None else keys[i], i))
    return [moves[i] for i in order]
