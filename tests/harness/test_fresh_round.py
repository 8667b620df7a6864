"""`fresh_round`: one round of measure_plans in a fresh process, reproducing this process's losses."""

import logging

import pytest

from torchsmith.harness.compare import measure_plans
from torchsmith.harness.fresh_round import fresh_round
from torchsmith.plan import OptimizerImpl, Plan
from torchsmith.workload import load_workload

FUSED = Plan().replace(optimizer=OptimizerImpl(impl="foreach"))


@pytest.mark.slow
def test_a_fresh_process_measures_the_same_training_as_this_one():
    here = measure_plans(load_workload("mlp"), [Plan(), FUSED], warmup=1, steps=3, device="cpu")
    there = fresh_round("mlp", [Plan(), FUSED], warmup=1, steps=3, device="cpu", measure_memory=True)
    assert there is not None
    assert [m.plan for m in there] == [Plan(), FUSED]
    # Same seed, same batches, same kernels: the child's losses are this process's, bit for bit.
    assert [m.losses for m in there] == [m.losses for m in here]
    assert all(len(m.step_times) == 3 and m.step_seconds and m.peak_memory_bytes for m in there)
    assert there[1].loss_rel_diff is not None and there[1].loss_rel_diff < 1e-5


def test_a_workload_built_in_python_has_no_fresh_round():
    assert fresh_round(None, [Plan(), FUSED], warmup=1, steps=3, device="cpu") is None


@pytest.mark.slow
def test_a_child_that_fails_is_none_and_says_why_in_the_log(caplog):
    with caplog.at_level(logging.WARNING, logger="torchsmith.harness.fresh_round"):
        assert fresh_round("no_such_module:workload", [Plan()], warmup=1, steps=2, device="cpu") is None
    assert "exited 1" in caplog.text and "no_such_module" in caplog.text


def test_load_workload_remembers_its_spec():
    assert load_workload("mlp").spec == "mlp"
