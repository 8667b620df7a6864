"""Precision: 16-bit variants track fp32's loss on gpt-mini; fp16 needs CUDA; bf16 parameters keep fp32 masters."""

from __future__ import annotations

import pytest
import torch
from transforms_helpers import gpt_batch, gpt_loss, one_thread, tiny_gpt  # noqa: F401 (one_thread: autouse fixture)

from torchsmith.engine.loop import run
from torchsmith.engine.step import train_step
from torchsmith.plan import FP32, Autocast, BF16Params, Plan
from torchsmith.transforms.base import TransformError
from torchsmith.transforms.parts import StepParts
from torchsmith.transforms.precision import apply_precision
from torchsmith.workloads.gpt_mini import workload as gpt_workload

STEPS = 50
# Measured max |loss - fp32 loss| over these 50 steps: ~3e-4 for both variants (this CPU, torch 2.13).
# bf16 rounds each matmul input to 8 mantissa bits; the stated bound leaves ~30x headroom for other CPUs.
LOSS_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def tiny_workload():
    return gpt_workload(batch_size=4, block_size=32, n_layer=2, n_head=2, n_embd=32, batches_per_epoch=STEPS,
                        eval_batches=1)


@pytest.fixture(scope="module")
def fp32_losses(tiny_workload):
    return torch.tensor(run(tiny_workload, Plan(precision=FP32()), steps=STEPS).losses)


@pytest.mark.parametrize("precision", [Autocast(dtype="bfloat16"), BF16Params()], ids=["autocast_bf16", "bf16_params"])
def test_loss_tracks_fp32_over_50_steps(tiny_workload, fp32_losses, precision):
    losses = torch.tensor(run(tiny_workload, Plan(precision=precision), steps=STEPS).losses)
    assert len(losses) == STEPS
    assert fp32_losses[-1] < fp32_losses[0] - 0.3  # it actually trained
    assert (losses - fp32_losses).abs().max() < LOSS_TOLERANCE


def _parts(model, lr=1e-3, device="cpu") -> StepParts:
    return StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr), loss_fn=gpt_loss,
                     device=torch.device(device))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_fp16_refused_without_cuda():
    parts = _parts(tiny_gpt(n_layer=1))
    with pytest.raises(TransformError, match=r"fp16 autocast needs CUDA[\s\S]*Tip: use Autocast\(dtype='bfloat16'\)"):
        apply_precision(parts, Autocast(dtype="float16"))
    assert parts.scaler is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 autocast needs CUDA")
def test_fp16_on_cuda_uses_a_grad_scaler():
    parts = _parts(tiny_gpt(n_layer=1).cuda(), device="cuda")
    apply_precision(parts, Autocast(dtype="float16"))
    assert parts.scaler is not None
    loss = train_step(parts, tuple(t.cuda() for t in gpt_batch()))
    assert torch.isfinite(loss)


def test_bf16_params_where_safe_with_fp32_masters():
    model = tiny_gpt(n_layer=1)
    masters = {n: p for n, p in model.named_parameters()}
    parts = _parts(model, lr=1e-6)
    change = apply_precision(parts, BF16Params())
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert dtypes["blocks.0.mlp.c_fc.weight"] == dtypes["lm_head.weight"] == torch.bfloat16
    # Norms and embeddings stay fp32.
    assert dtypes["wte.weight"] == dtypes["blocks.0.ln_1.weight"] == dtypes["ln_f.bias"] == torch.float32
    # The optimizer still holds the original fp32 parameters (the masters).
    held = [p for g in parts.optimizer.param_groups for p in g["params"]]
    assert [id(p) for p in held] == [id(p) for p in masters.values()]
    assert all(p.dtype == torch.float32 for p in held)
    # state_dict reports the masters: exact fp32 checkpoints.
    sd = model.state_dict()
    assert all(v.dtype == torch.float32 for v in sd.values())
    before = masters["blocks.0.mlp.c_fc.weight"].detach().clone()
    working_before = model.blocks[0].mlp.c_fc.weight.detach().clone()
    train_step(parts, gpt_batch())
    after = masters["blocks.0.mlp.c_fc.weight"]
    # lr=1e-6: updates far below bf16's resolution. The fp32 master moves; rounded to bf16 most
    # weights do not, which is exactly the update a bf16-only optimizer would have lost.
    assert (after != before).float().mean() > 0.5  # (some gradient entries are ~0)
    assert (model.blocks[0].mlp.c_fc.weight == working_before).float().mean() > 0.9
    assert torch.equal(model.blocks[0].mlp.c_fc.weight, after.to(torch.bfloat16))  # refreshed copy
    assert all(p.grad is None for p in model.parameters())  # zero_grad reached every gradient
    # load_state_dict fills the masters exactly.
    target = {k: v + 1e-7 for k, v in sd.items()}
    model.load_state_dict(target)
    assert torch.equal(masters["blocks.0.mlp.c_fc.weight"], target["blocks.0.mlp.c_fc.weight"])
    change.revert()
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_bf16_params_refused_without_linear_or_conv():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.LayerNorm(4))
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=lambda m, b: m(b).sum(), device=torch.device("cpu"))
    with pytest.raises(TransformError, match=r"Linear/Conv[\s\S]*Tip:"):
        apply_precision(parts, BF16Params())
