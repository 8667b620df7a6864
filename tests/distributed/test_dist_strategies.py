"""DDP, ZeRO-1 and FSDP2 on 2 gloo ranks: equal results, sharded state, counted collectives.

One torchrun job (tests/distributed/dist_equiv_worker.py) trains each strategy on the same 4 global
batches of a tiny mlp and writes what it measured; the tests below assert on it.
"""

from __future__ import annotations

import json

import pytest
from dist_helpers import HERE, torchrun

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("equiv")
    proc = torchrun([str(HERE / "dist_equiv_worker.py")], [str(out)])
    assert proc.returncode == 0, proc.stdout[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_ddp_on_two_ranks_equals_one_process_on_the_full_batch(ranks):
    for r in ranks:
        # Same maths, different summation order (two half-batch means averaged): fp32 rounding only.
        assert r["diff_ddp_single"] < 1e-6, r["diff_ddp_single"]


def test_zero1_and_fsdp2_equal_ddp(ranks):
    for r in ranks:
        assert r["diff_zero_ddp"] < 1e-6, r["diff_zero_ddp"]
        assert r["diff_fsdp_ddp"] < 1e-6, r["diff_fsdp_ddp"]


def test_fp16_comm_hook_halves_the_bytes_and_stays_close(ranks):
    comm = ranks[0]["comm"]
    assert comm["ddp_fp16"]["bytes"]["all_reduce"] * 2 == comm["ddp"]["bytes"]["all_reduce"]
    assert 0 < ranks[0]["diff_fp16_ddp"] < 1e-4  # compressed, so not bit-equal, but close


def test_zero1_keeps_about_half_the_optimizer_state_per_rank(ranks):
    ddp = [r["opt_bytes"]["ddp"] for r in ranks]
    zero = [r["opt_bytes"]["zero1"] for r in ranks]
    assert ddp[0] == ddp[1] > 0
    assert sum(zero) == ddp[0], (zero, ddp)  # the shards partition the full state
    for z in zero:
        assert 0.4 <= z / ddp[0] <= 0.6, (z, ddp[0])


def test_accumulation_all_reduces_once_per_optimizer_step(ranks):
    r = ranks[0]
    steps = r["comm"]["ddp"]["steps"]
    # 4 micro-batches per step under no_sync: the same collectives as 1 micro-batch.
    assert r["accum_4"] == r["accum_1"]
    assert r["accum_1"]["calls"] % steps == 0 and r["accum_1"]["bytes"] == steps * r["param_bytes"]
    # Control: without no_sync every micro-batch all-reduces.
    assert r["accum_4_without_no_sync"]["calls"] == 4 * r["accum_1"]["calls"]
    # FSDP2 reduce-scatters each unit's gradients once per step too (3 units: 2 blocks + root).
    assert r["fsdp_accum_4"]["reduce_scatter_calls"] == 3 * steps


def test_communication_volume_per_step(ranks):
    r = ranks[0]
    p, comm, steps = r["param_bytes"], r["comm"], r["comm"]["ddp"]["steps"]
    per_step = {k: {op: b / steps for op, b in v["bytes"].items()} for k, v in comm.items()}
    assert per_step["ddp"] == {"all_reduce": p}
    assert per_step["zero1"] == {"all_reduce": p, "broadcast": p}
    # FSDP2 gathers the parameters for forward and again for backward (resharded after forward).
    assert per_step["fsdp2"] == {"all_gather": 2 * p, "reduce_scatter": p}


def test_desync_names_the_parameter_perturbed_on_rank_1(ranks):
    for r in ranks:
        assert r["desync_clean"] == []
        assert r["desync_perturbed"] == [{"name": "blocks.1.linear.bias", "ranks": [1]}]


def test_nan_on_one_rank_makes_every_rank_skip_the_same_step(ranks):
    for r in ranks:
        assert r["nan"]["skipped"] == 1 and r["nan"]["steps"] == [2], r["nan"]
        assert r["nan"]["desync"] == []  # both ranks skipped: replicas still identical


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "fsdp2"])
def test_dcp_checkpoint_round_trip_is_exact_for_each_strategy(ranks, strategy):
    for r in ranks:
        got = r["resume"][strategy]
        assert got["step"] == r["comm"]["ddp"]["steps"]
        # Parameters and optimizer state (seen through the next update) restored bit for bit.
        assert got["after_load"] == 0.0 and got["after_next_step"] == 0.0, got
