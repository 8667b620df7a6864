"""The ``scale`` rows of ``tune --nproc-per-node N``: each strategy predicted at N ranks (and
measured there, by the search) and at 8, 64 and 512 ranks over an assumed interconnect.

The prediction (``distributed.scale_model``) comes from the inputs the search's first round
measured on the ranks without training across them (``harness.scale_inputs``): the per-rank
step beside its neighbours, the model's shape, and the collectives on these ranks, to each of
which an alpha-beta link is fitted. At N, the fitted links of this machine; past it, the
interconnect the user states (``--interconnect``, default ``DEFAULT_INTERCONNECT``), since nothing here can measure
a network it does not have. The measured fields at N are the search's own: DDP's defaults (the
baseline), ZeRO-1 and FSDP2 as their candidates ran, each in the round that measured it.

Example::

    rows = scale_rows(inputs, nproc=2, measured={"ddp": (0.41, 2**27)}, interconnect="100Gbps,5us",
                      overlap=False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchsmith.distributed.alpha_beta import CollectiveSample, Links, fit_links, links_of, parse_interconnect
from torchsmith.distributed.scale_model import (
    STRATEGIES,
    ModelShape,
    ScaleAssumptions,
    ScaleRow,
    StepProfile,
    Strategy,
    predict,
)
from torchsmith.plan import FSDP2, Plan, Zero1
from torchsmith.tuner.result import Candidate

TABLE_RANKS = (8, 64, 512)
DEFAULT_INTERCONNECT = "100Gbps,5us"
"""A 100 Gbit/s network with 5 us latency per message: assumed, and printed with every prediction past N."""
MEASURED_AS = {"ddp": Plan(), "zero1": Plan(parallel=Zero1()), "fsdp2": Plan(parallel=FSDP2())}
"""The plan each strategy's measured row comes from (the scale model assumes DDP's and FSDP2's defaults)."""


def scale_rows(inputs: Mapping[str, Any], *, nproc: int, measured: Mapping[Strategy, tuple[float | None, int | None]],
               interconnect: str = DEFAULT_INTERCONNECT, overlap: bool = False) -> list[ScaleRow]:
    """Rows at ``nproc`` (predicted over the fitted links, measured where ``measured`` has the strategy),
    then at each of ``TABLE_RANKS`` over ``interconnect``. ``overlap``: see ``ScaleAssumptions``."""
    profile, shape, here = scale_parts(inputs)
    assumed = parse_interconnect(interconnect)
    cfg = ScaleAssumptions(overlap=overlap)
    rows = []
    for strategy in STRATEGIES:
        step_s, peak = measured.get(strategy, (None, None))
        rows.append(predict(strategy, nproc, profile=profile, shape=shape, link=here, cfg=cfg).row(
            measured_step_seconds=step_s, measured_peak_bytes=peak))
    rows += [predict(s, n, profile=profile, shape=shape, link=assumed, cfg=cfg).row()
             for n in TABLE_RANKS if n != nproc for s in STRATEGIES]
    return rows


def scale_parts(inputs: Mapping[str, Any]) -> tuple[StepProfile, ModelShape, Links]:
    """The profile, the model's shape and the links fitted to the collectives, from ``harness.scale_inputs``."""
    profile = StepProfile(**inputs["profile"])
    shape = ModelShape(tensor_bytes=tuple(inputs["tensor_bytes"]), block_bytes=tuple(inputs["block_bytes"]))
    return profile, shape, links_of(fit_links([CollectiveSample(**s) for s in inputs["samples"]]))


def measured_by_strategy(candidates: list[Candidate]) -> dict[Strategy, tuple[float | None, int | None]]:
    """Step seconds and peak bytes of each strategy as the search measured it on the ranks: DDP's
    defaults from the first baseline (the round the strategies ran in: they are searched first)."""
    out: dict[Strategy, tuple[float | None, int | None]] = {}
    baseline = next((c for c in candidates if c.knob == "baseline"), None)
    if baseline is not None:
        out["ddp"] = (baseline.step_seconds, baseline.peak_memory_bytes)
    for strategy in ("zero1", "fsdp2"):
        ran = [c for c in candidates if c.plan == MEASURED_AS[strategy] and c.step_seconds is not None]
        if ran:
            out[strategy] = (ran[0].step_seconds, ran[0].peak_memory_bytes)
    return out


def describe_interconnect(interconnect: str) -> str:
    """``'100Gbps,5us'`` -> the link it means, for the table's heading; raises ValueError when unreadable."""
    return parse_interconnect(interconnect).describe()

