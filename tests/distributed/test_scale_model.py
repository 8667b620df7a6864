"""The scale model: derived collectives per strategy, the overlap bounds, the memory formulas, ScaleRow JSON."""

from __future__ import annotations

import json

import pytest
from torch import nn

from torchsmith.distributed.alpha_beta import COLLECTIVES, Link, collective_seconds
from torchsmith.distributed.scale_model import (
    STRATEGIES,
    ModelShape,
    ScaleAssumptions,
    ScaleRow,
    StepProfile,
    comm_calls,
    ddp_buckets,
    model_shape,
    predict,
    predict_memory,
    predict_step,
    predict_table,
)

MiB = 2**20
# 4 blocks of 2 MiB plus a 1 MiB root: W = 9 MiB of fp32 parameters.
SHAPE = ModelShape(tensor_bytes=(MiB,) + (MiB,) * 8, block_bytes=(2 * MiB,) * 4)
PSI = SHAPE.param_bytes // 4
PROFILE = StepProfile(forward_seconds=0.1, backward_seconds=0.2, optimizer_seconds=0.04,
                      peak_bytes=SHAPE.param_bytes + 8 * PSI + 50 * MiB, optimizer_state_bytes=8 * PSI)
LINK = Link(alpha_seconds=1e-4, beta_seconds_per_byte=1e-9)
T = 50 * MiB  # the 1-rank transient of PROFILE


def test_ddp_buckets_fill_in_reverse_parameter_order():
    # Backward produces the last parameter's gradient first: 1+2 reach the cap, then 3, then 4.
    assert ddp_buckets([4, 3, 2, 1], cap_bytes=3) == [3, 3, 4]
    assert ddp_buckets([MiB] * 9, cap_bytes=25 * MiB) == [9 * MiB]
    assert sum(ddp_buckets(SHAPE.tensor_bytes, 2 * MiB)) == SHAPE.param_bytes


def test_derived_bytes_per_step_match_the_counted_ones():
    # The same totals tests/distributed/test_dist_strategies.py counts on a real 2-rank run.
    def totals(strategy):
        out: dict[str, int] = {}
        for c in comm_calls(strategy, SHAPE, ScaleAssumptions()):
            out[c.collective] = out.get(c.collective, 0) + c.nbytes
        return out

    w = SHAPE.param_bytes
    assert totals("ddp") == {"all_reduce": w}
    assert totals("zero1") == {"all_reduce": w, "broadcast": w}
    assert totals("fsdp2") == {"all_gather": 2 * w, "reduce_scatter": w}  # gathered for forward and for backward
    no_reshard = [c for c in comm_calls("fsdp2", SHAPE, ScaleAssumptions(reshard_after_forward=False))
                  if c.collective == "all_gather"]
    assert sum(c.nbytes for c in no_reshard) == w


def test_zero1_broadcasts_once_per_parameter_tensor():
    calls = comm_calls("zero1", SHAPE, ScaleAssumptions())
    assert sum(c.collective == "broadcast" for c in calls) == len(SHAPE.tensor_bytes)


def test_one_rank_has_no_communication_cost():
    for strategy in ("ddp", "zero1", "fsdp2"):
        step = predict_step(strategy, 1, profile=PROFILE, shape=SHAPE, link=LINK)
        assert step.exposed_comm_seconds == step.hideable_comm_seconds == 0.0
    assert predict_step("ddp", 1, profile=PROFILE, shape=SHAPE, link=LINK).predicted_seconds == \
        pytest.approx(PROFILE.compute_seconds)


def test_ddp_step_adds_the_all_reduce_without_overlap():
    cfg = ScaleAssumptions(overlap=False, bucket_cap_bytes=3 * MiB)
    step = predict_step("ddp", 8, profile=PROFILE, shape=SHAPE, link=LINK, cfg=cfg)
    expected = sum(collective_seconds("all_reduce", ranks=8, nbytes=b, link=LINK) for b in (3 * MiB,) * 3)
    assert step.no_overlap_seconds == pytest.approx(PROFILE.compute_seconds + expected)
    assert step.predicted_seconds == step.no_overlap_seconds


def test_full_overlap_hides_all_but_the_last_bucket_under_backward():
    cfg = ScaleAssumptions(overlap=True, bucket_cap_bytes=3 * MiB)
    step = predict_step("ddp", 8, profile=PROFILE, shape=SHAPE, link=LINK, cfg=cfg)
    last = collective_seconds("all_reduce", ranks=8, nbytes=3 * MiB, link=LINK)
    assert step.exposed_comm_seconds == pytest.approx(last)
    assert step.full_overlap_seconds == pytest.approx(PROFILE.compute_seconds + last)  # 2 buckets << 0.2 s backward
    assert step.predicted_seconds == step.full_overlap_seconds < step.no_overlap_seconds


def test_overlap_cannot_hide_more_than_the_window():
    slow = Link(alpha_seconds=0.0, beta_seconds_per_byte=1e-7)  # 10 MB/s: comm >> compute
    cfg = ScaleAssumptions(overlap=True, bucket_cap_bytes=3 * MiB)
    step = predict_step("ddp", 2, profile=PROFILE, shape=SHAPE, link=slow, cfg=cfg)
    assert step.full_overlap_seconds == pytest.approx(
        PROFILE.compute_seconds + step.exposed_comm_seconds + step.hideable_comm_seconds - PROFILE.backward_seconds)


def test_sharded_strategies_divide_the_optimizer_time():
    free = Link(alpha_seconds=0.0, beta_seconds_per_byte=0.0)
    for strategy, optimizer in (("ddp", 0.04), ("zero1", 0.01), ("fsdp2", 0.01)):
        step = predict_step(strategy, 4, profile=PROFILE, shape=SHAPE, link=free)
        assert step.compute_seconds == pytest.approx(0.3 + optimizer)


def test_memory_formulas_per_strategy():
    w, k = SHAPE.param_bytes, 8 * PSI
    ddp = predict_memory("ddp", 8, profile=PROFILE, shape=SHAPE)
    assert ddp.peak_bytes == w + k + w + T  # + DDP's flat gradient buckets
    assert predict_memory("ddp", 8, profile=PROFILE, shape=SHAPE,
                          cfg=ScaleAssumptions(gradient_as_bucket_view=True)).peak_bytes == w + k + T
    zero = predict_memory("zero1", 8, profile=PROFILE, shape=SHAPE)
    assert zero.peak_bytes == w + k // 8 + w + T
    fsdp = predict_memory("fsdp2", 8, profile=PROFILE, shape=SHAPE)
    # Sharded weights and state, plus the root and two gathered blocks.
    assert fsdp.peak_bytes == (w + k) // 8 + (MiB + 2 * 2 * MiB) + T


def test_memory_falls_with_ranks_only_where_the_strategy_shards():
    peaks = {s: [predict_memory(s, n, profile=PROFILE, shape=SHAPE).peak_bytes for n in (2, 8, 64)]
             for s in ("ddp", "zero1", "fsdp2")}
    assert peaks["ddp"][0] == peaks["ddp"][1] == peaks["ddp"][2]
    assert peaks["zero1"][0] > peaks["zero1"][1] > peaks["zero1"][2]
    assert peaks["fsdp2"][0] > peaks["fsdp2"][1] > peaks["fsdp2"][2]
    assert peaks["fsdp2"][2] < peaks["zero1"][2] < peaks["ddp"][2]


def test_a_profile_whose_peak_misses_its_own_state_is_refused():
    bad = StepProfile(forward_seconds=0.1, backward_seconds=0.1, optimizer_seconds=0.1, peak_bytes=10,
                      optimizer_state_bytes=8 * PSI)
    with pytest.raises(ValueError, match="missed part of the live state"):
        predict_memory("ddp", 2, profile=bad, shape=SHAPE)


def test_model_shape_finds_tensors_and_blocks():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)]), nn.Linear(4, 10))
    model = nn.Sequential(*list(model.children()))
    shape = model_shape(model, blocks="1")
    assert shape.block_bytes == (80, 80, 80)
    assert shape.param_bytes == 4 * (40 + 3 * 20 + 50)
    assert shape.root_bytes == 4 * (40 + 50)


def test_scale_row_json_has_the_issue_fields_with_nulls_where_not_measured():
    predicted = predict("fsdp2", 64, profile=PROFILE, shape=SHAPE, link=LINK).row()
    data = json.loads(json.dumps(predicted.to_json()))
    assert set(data) == {"ranks", "strategy", "predicted_step_seconds", "predicted_peak_bytes",
                         "measured_step_seconds", "measured_peak_bytes", "predicted_comm_share"}
    assert 0 < data["predicted_comm_share"] < 1
    assert data["ranks"] == 64 and data["strategy"] == "fsdp2"
    assert data["measured_step_seconds"] is None and data["measured_peak_bytes"] is None
    measured = ScaleRow(ranks=2, strategy="ddp", predicted_step_seconds=1.1, predicted_peak_bytes=90,
                        measured_step_seconds=1.0, measured_peak_bytes=100)
    assert measured.step_error() == pytest.approx(0.1) and measured.peak_error() == pytest.approx(-0.1)
    assert predicted.step_error() is None


def test_predict_table_covers_every_strategy_at_every_rank_count():
    rows = predict_table((8, 64, 512), profile=PROFILE, shape=SHAPE, link=LINK)
    assert [(p.ranks, p.strategy) for p in rows] == [(n, s) for n in (8, 64, 512) for s in ("ddp", "zero1", "fsdp2")]


def test_each_collective_is_costed_over_its_own_link():
    same = dict.fromkeys(COLLECTIVES, LINK)
    for strategy in STRATEGIES:  # one link for all, or the same link per collective: the same step
        assert predict_step(strategy, 2, profile=PROFILE, shape=SHAPE, link=same).predicted_seconds == \
            predict_step(strategy, 2, profile=PROFILE, shape=SHAPE, link=LINK).predicted_seconds
    slow_gather = {**same, "all_gather": Link(alpha_seconds=1e-4, beta_seconds_per_byte=4e-9)}

    def comm(strategy, link):
        step = predict_step(strategy, 2, profile=PROFILE, shape=SHAPE, link=link)
        return step.exposed_comm_seconds + step.hideable_comm_seconds

    assert comm("ddp", slow_gather) == comm("ddp", LINK)  # DDP all-reduces only
    assert comm("fsdp2", slow_gather) > comm("fsdp2", LINK)  # FSDP2 all-gathers its units
