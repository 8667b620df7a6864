"""torch.compile: regional compile matches eager; failures fall back to eager with a warning;
compile time is reported apart from step time."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from transforms_helpers import gpt_batch, gpt_loss, one_thread, tiny_gpt  # noqa: F401 (one_thread: autouse fixture)

from torchsmith.engine.loop import run
from torchsmith.engine.step import train_step
from torchsmith.plan import Compile, Plan
from torchsmith.transforms.compile import apply_compile
from torchsmith.transforms.parts import StepParts
from torchsmith.workloads.gpt_mini import workload as gpt_workload


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _failing_backend(gm, example_inputs):
    raise RuntimeError("backend exploded on purpose")


@pytest.mark.slow
def test_forward_compile_failure_falls_back_to_eager_with_warning():
    model, batch = tiny_gpt(n_layer=2), gpt_batch()
    want = gpt_loss(tiny_gpt(n_layer=2), batch)
    change = apply_compile(model, Compile(enabled=True, regional=True), backend=_failing_backend)
    with pytest.warns(RuntimeWarning, match=r"torch.compile failed[\s\S]*backend exploded[\s\S]*Tip:"):
        got = gpt_loss(model, batch)
    torch.testing.assert_close(got, want)
    assert "backend exploded" in change.fallback.reason
    assert all(b._compiled_call_impl is None for b in model.blocks)  # eager from now on
    gpt_loss(model, batch).backward()  # and trains


@pytest.mark.slow
def test_backward_compile_failure_reruns_the_step_eagerly():
    """The backward is compiled lazily, inside loss.backward(): the step catches it and re-runs."""

    def bad_backward(gm, example_inputs):
        raise RuntimeError("backward compiler exploded on purpose")

    backend = aot_autograd(fw_compiler=lambda gm, ex: gm.forward, bw_compiler=bad_backward)
    reference, model, batch = tiny_gpt(n_layer=2), tiny_gpt(n_layer=2), gpt_batch()
    parts = [StepParts(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1), loss_fn=gpt_loss,
                       device=torch.device("cpu")) for m in (reference, model)]
    change = apply_compile(model, Compile(enabled=True), recover=parts[1].recover, backend=backend)
    want = train_step(parts[0], batch)
    with pytest.warns(RuntimeWarning, match="backward compiler exploded"):
        got = train_step(parts[1], batch)
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)  # one update, from clean gradients: no double accumulation
    assert change.fallback.reason is not None
    change.revert()
    assert parts[1].recover == []


@pytest.mark.slow
def test_user_errors_are_not_swallowed():
    model = tiny_gpt(n_layer=1, block_size=8)
    change = apply_compile(model, Compile(enabled=True), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning for the model's own error
        with pytest.raises(ValueError, match="block_size"):
            model(torch.zeros(1, 9, dtype=torch.long))
    assert change.fallback.reason is None
    assert model._compiled_call_impl is not None  # still compiled


@pytest.mark.slow
@pytest.mark.multiprocess
def test_regional_compile_matches_eager_and_compile_time_is_reported_apart():
    """One Inductor compile (the expensive part) serves both claims."""
    w = gpt_workload(batch_size=2, block_size=16, n_layer=2, n_head=2, n_embd=16, batches_per_epoch=4,
                     eval_batches=1)
    eager = run(w, Plan(), steps=4)
    compiled = run(w, Plan(compile=Compile(enabled=True, regional=True)), steps=4)
    assert any("2 blocks" in c for c in compiled.changes)
    # Same seed, same batches: every step's loss (a function of the previous updates) matches eager.
    torch.testing.assert_close(torch.tensor(compiled.losses), torch.tensor(eager.losses), rtol=1e-4, atol=1e-5)
    assert eager.compile_seconds == 0
    assert compiled.compile_seconds > 0
    # Compilation happens inside the first step and is part of it; the median step excludes it.
    assert compiled.first_step_seconds >= compiled.compile_seconds > compiled.phases.step_median
