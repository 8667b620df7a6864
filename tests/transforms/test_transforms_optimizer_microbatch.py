"""Optimizer implementations give the same parameters; micro-batching gives the full batch's gradients."""

from __future__ import annotations

import pytest
import torch
from transforms_helpers import gpt_batch, gpt_loss, one_thread, tiny_gpt  # noqa: F401 (one_thread: autouse fixture)

from torchsmith.engine.step import train_step
from torchsmith.measure.memory import track_peak_memory
from torchsmith.plan import MicroBatching, OptimizerImpl
from torchsmith.transforms.base import TransformError
from torchsmith.transforms.microbatching import apply_microbatching
from torchsmith.transforms.optimizer_impl import apply_optimizer_impl
from torchsmith.transforms.parts import StepParts

N_STEPS = 5


def _train(impl: str, make_opt, set_to_none: bool = True) -> tuple[list[torch.Tensor], StepParts]:
    model = tiny_gpt(n_layer=1, n_embd=16)
    parts = StepParts(model=model, optimizer=make_opt(model.parameters()), loss_fn=gpt_loss,
                      device=torch.device("cpu"), set_to_none=set_to_none)
    apply_optimizer_impl(parts.optimizer, OptimizerImpl(impl=impl))
    for i in range(N_STEPS):
        train_step(parts, gpt_batch(seed=i))
    return [p.detach().clone() for p in model.parameters()], parts


def test_sgd_for_loop_and_foreach_are_bitwise_identical():
    # Plain SGD is one `param.add_(grad, alpha=-lr)` per element either way: same op, same rounding.
    make = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    loop, _ = _train("for_loop", make)
    multi, _ = _train("foreach", make)
    assert all(torch.equal(a, b) for a, b in zip(loop, multi, strict=True))


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_implementations_agree_within_rounding(impl):
    # PyTorch does not promise bitwise equality across Adam implementations (fused kernels
    # reorder the arithmetic). Where a gradient is ~eps, m / (sqrt(v) + eps) amplifies that
    # rounding, so the bound is absolute: 1% of one step's largest update (lr) after N steps.
    # Measured: foreach matches to ~1e-7, fused to ~8e-6.
    make = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1)  # noqa: E731
    loop, _ = _train("for_loop", make)
    other, _ = _train(impl, make)
    for a, b in zip(loop, other, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-2 * 1e-2)


def test_zero_grad_set_to_none_frees_gradients():
    make = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    _, freed = _train("foreach", make, set_to_none=True)
    assert all(p.grad is None for p in freed.model.parameters())
    _, zeroed = _train("foreach", make, set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in zeroed.model.parameters())


def test_fused_refused_where_unsupported():
    opt = torch.optim.Adagrad(tiny_gpt(n_layer=1).parameters())
    if "fused" in opt.defaults:
        opt = torch.optim.RMSprop(tiny_gpt(n_layer=1).parameters())
    with pytest.raises(TransformError, match=r"no 'fused' implementation[\s\S]*Tip:"):
        apply_optimizer_impl(opt, OptimizerImpl(impl="fused"))


def _grads_and_peak(count: int, batch) -> tuple[dict[str, torch.Tensor], int]:
    model = tiny_gpt(n_layer=2, n_embd=64)
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.0), loss_fn=gpt_loss,
                      device=torch.device("cpu"), set_to_none=True)
    apply_microbatching(parts, MicroBatching(count=count))
    grads: dict[str, torch.Tensor] = {}
    # Read the accumulated gradients just before the optimizer step (zero_grad frees them after).
    parts.optimizer.register_step_pre_hook(
        lambda opt, a, k: grads.update({n: p.grad.clone() for n, p in model.named_parameters()}))
    with track_peak_memory("cpu", live=(model, parts.optimizer)) as mem:
        train_step(parts, batch)
    return grads, mem.result.peak_delta_bytes


def test_microbatches_give_the_full_batch_gradients_and_a_lower_peak():
    batch = gpt_batch(batch=8, seq=32)
    full, peak_full = _grads_and_peak(1, batch)
    micro, peak_micro = _grads_and_peak(4, batch)
    for k in full:
        torch.testing.assert_close(micro[k], full[k], rtol=1e-4, atol=1e-6)
    # Activations scale with the micro-batch: 4 micro-batches need well under the full batch's peak.
    assert peak_micro < 0.6 * peak_full, (peak_micro, peak_full)


def test_uneven_split_weights_each_micro_batch_by_its_share():
    batch = gpt_batch(batch=7, seq=16)  # 3 micro-batches of 3, 2, 2 samples
    full, _ = _grads_and_peak(1, batch)
    micro, _ = _grads_and_peak(3, batch)
    for k in full:
        torch.testing.assert_close(micro[k], full[k], rtol=1e-4, atol=1e-6)
