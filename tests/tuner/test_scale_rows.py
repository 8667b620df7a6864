"""tune --nproc-per-node's scale rows from the inputs its first round measures (synthetic inputs here)."""

from __future__ import annotations

import pytest

from scale_fixtures import LINK, synthetic_scale_inputs
from torchsmith.distributed.alpha_beta import collective_seconds
from torchsmith.plan import FSDP2, Plan, Zero1
from torchsmith.tuner.result import Candidate
from torchsmith.tuner.scale_rows import TABLE_RANKS, measured_by_strategy, scale_rows


def _candidate(plan: Plan, knob: str, step: float | None, peak: int | None) -> Candidate:
    return Candidate(plan, knob, "slower", step, None, peak, None, None, None, None)


def test_rows_at_n_are_predicted_over_the_fitted_link_and_carry_what_the_search_measured():
    measured = measured_by_strategy([_candidate(Plan(), "baseline", 0.05, 50 * 2**20),
                                     _candidate(Plan(parallel=Zero1()), "parallel", 0.06, 45 * 2**20),
                                     _candidate(Plan(parallel=FSDP2()), "parallel", None, None)])  # failed
    assert set(measured) == {"ddp", "zero1"}
    rows = scale_rows(synthetic_scale_inputs(), nproc=2, measured=measured)
    assert [(r.ranks, r.strategy) for r in rows[:3]] == [(2, "ddp"), (2, "zero1"), (2, "fsdp2")]
    assert rows[0].measured_step_seconds == 0.05 and rows[1].measured_peak_bytes == 45 * 2**20
    assert rows[2].measured_step_seconds is None
    # DDP at 2 ranks, no overlap: compute + every bucket's all-reduce over the link the samples came from.
    ddp_comm = collective_seconds("all_reduce", ranks=2, nbytes=8 * 2**20, link=LINK)
    assert rows[0].predicted_step_seconds == pytest.approx(0.034 + ddp_comm, rel=0.05)
    past = rows[3:]
    assert sorted({r.ranks for r in past}) == list(TABLE_RANKS) and all(r.measured_step_seconds is None for r in past)
    fsdp_peaks = [r.predicted_peak_bytes for r in rows if r.strategy == "fsdp2"]
    assert fsdp_peaks == sorted(fsdp_peaks, reverse=True)  # sharded state shrinks per rank as ranks grow


def test_an_unreadable_interconnect_is_refused_with_its_format():
    with pytest.raises(ValueError, match="100Gbps"):
        scale_rows(synthetic_scale_inputs(), nproc=2, measured={}, interconnect="fast")
