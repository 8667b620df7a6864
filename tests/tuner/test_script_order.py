"""The knob order of the script tuner, from the optimizer step's measured share (Amdahl's bound)."""

import pytest

from torchsmith.engine.space import Dimension
from torchsmith.plan import OptimizerImpl, Threads
from torchsmith.tuner.script.order import order_by_share

DIMS = [Dimension("threads", "threads", (Threads(intra_op=1),), False),
        Dimension("optimizer", "optimizer", (OptimizerImpl(impl="foreach"), OptimizerImpl(impl="fused")), False)]


def test_a_large_share_puts_the_optimizer_first_and_says_why():
    dims, skipped, notes = order_by_share(DIMS, optimizer_share=0.4)
    assert [d.name for d in dims] == ["optimizer", "threads"] and skipped == []
    assert notes == ["optimizer.step takes 40% of the step as written (a free step: up to 1.67x): "
                     "the optimizer knob is tried first"]


def test_a_share_no_optimizer_can_win_on_skips_the_knob():
    dims, skipped, notes = order_by_share(DIMS, optimizer_share=0.02)
    assert [d.name for d in dims] == ["threads"] and notes == []
    assert skipped == [("optimizer", "optimizer.step takes 2% of the step as written: even a free step would give "
                                     "at most 1.020x, below the 1.03x a win needs")]


@pytest.mark.parametrize("share", [None, 0.05])  # not measured (CUDA); a share between the two bounds
def test_otherwise_the_order_is_as_written(share):
    assert order_by_share(DIMS, optimizer_share=share) == (DIMS, [], [])


def test_a_closure_optimizer_whose_step_is_the_whole_step_goes_first():
    dims, _, _ = order_by_share(DIMS, optimizer_share=1.0)  # LBFGS, Lightning: forward and backward inside step
    assert dims[0].name == "optimizer"
