"""Lean activations and the fused activation + Linear: exact, and measured saved bytes."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.measure.saved import count_saved_tensors
from torchsmith.ops.act_linear import ActLinearMLP, act_linear
from torchsmith.ops.activations import LeanGELU, LeanSiLU, gelu, silu

KINDS = {
    "gelu": (lambda x: gelu(x), lambda x: F.gelu(x)),
    "gelu_tanh": (lambda x: gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "silu": (silu, F.silu),
}


class NewGELU(nn.Module):
    """nanoGPT's hand-written tanh GELU: the composite these Functions improve on."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@pytest.mark.parametrize("kind", KINDS)
def test_activation_gradcheck_float64(kind):
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True) * 3
    assert torch.autograd.gradcheck(KINDS[kind][0], (x.detach().requires_grad_(),))


@pytest.mark.parametrize("kind", KINDS)
def test_activation_matches_native_on_gpt_mini_shape(kind):
    lean, ref = KINDS[kind]
    x = (3 * torch.randn(16, 128, 1024)).requires_grad_()  # gpt-mini's MLP hidden: (B, T, 4C)
    g = torch.randn_like(x)
    y, (gx,) = lean(x), torch.autograd.grad(lean(x), x, g)
    yr, (gr,) = ref(x), torch.autograd.grad(ref(x), x, g)
    torch.testing.assert_close(y, yr)
    torch.testing.assert_close(gx, gr, rtol=1e-5, atol=1e-5)  # fp32: a few ulps of |grad| ~ 1


def _saved_bytes(fn, x) -> int:
    with count_saved_tensors() as saved:
        fn(x)
    return saved.result.bytes


@pytest.mark.parametrize("lean, stock", [(LeanGELU(), nn.GELU()), (LeanGELU("tanh"), nn.GELU(approximate="tanh")),
                                         (LeanSiLU(), nn.SiLU())])
def test_activation_saves_only_its_input(lean, stock):
    x = torch.randn(64, 256, requires_grad=True)
    assert _saved_bytes(lean, x) == x.nbytes
    # Measured fact: the native modules already save only their input in eager mode.
    assert _saved_bytes(stock, x) == x.nbytes


def test_lean_gelu_saves_a_fraction_of_a_composite_gelu():
    x = torch.randn(64, 256, requires_grad=True)
    assert _saved_bytes(NewGELU(), x) >= 3 * _saved_bytes(LeanGELU("tanh"), x)
    assert _saved_bytes(lambda t: t * torch.sigmoid(t), x) == 2 * _saved_bytes(LeanSiLU(), x)


@pytest.mark.parametrize("kind", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [True, False])
def test_act_linear_gradcheck_float64(kind, bias):
    h = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True) if bias else None
    inputs = (h, w, b) if bias else (h, w)
    fn = lambda h, w, b=None: act_linear(h, w, b, activation=kind)
    assert torch.autograd.gradcheck(fn, inputs)


def _stock_mlp(mlp: ActLinearMLP, x):
    return mlp.c_proj(F.gelu(mlp.c_fc(x)))


def test_act_linear_mlp_matches_stock_on_gpt_mini_shapes():
    torch.manual_seed(0)
    mlp = ActLinearMLP(256, 1024)
    x = torch.randn(16, 128, 256, requires_grad=True)
    g = torch.randn(16, 128, 256)
    params = [x, *mlp.parameters()]
    got = torch.autograd.grad(mlp(x), params, g)
    ref = torch.autograd.grad(_stock_mlp(mlp, x), params, g)
    torch.testing.assert_close(mlp(x), _stock_mlp(mlp, x))
    for a, r in zip(got, ref, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


def test_act_linear_mlp_cuts_saved_bytes():
    mlp = ActLinearMLP(256, 1024)
    x = torch.randn(4, 128, 256, requires_grad=True)
    with count_saved_tensors(mlp) as lean:
        mlp(x)
    with count_saved_tensors(mlp) as stock:
        _stock_mlp(mlp, x)
    # Stock keeps x (C) + h (4C) + gelu(h) (4C) per token; fused keeps x + h: 5/9.
    assert stock.result.bytes == 9 * x.nbytes
    assert lean.result.bytes == 5 * x.nbytes


def test_act_linear_mlp_drops_into_gpt_mini():
    from torchsmith.workloads.gpt_mini import GPT, GPTConfig, gpt_loss

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=62, block_size=32, n_layer=2, n_head=2, n_embd=64)
    model = GPT(cfg)
    batch = (torch.randint(0, 62, (4, 32)), torch.randint(0, 62, (4, 32)))
    ref_loss = gpt_loss(model, batch)
    ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()))
    with count_saved_tensors(model) as before:
        gpt_loss(model, batch)
    for block in model.blocks:
        fused = ActLinearMLP(cfg.n_embd, 4 * cfg.n_embd)
        fused.load_state_dict(block.mlp.state_dict(), strict=False)  # same names: c_fc, c_proj
        block.mlp = fused
    loss = gpt_loss(model, batch)
    torch.testing.assert_close(loss, ref_loss)
    for a, r in zip(torch.autograd.grad(loss, list(model.parameters())), ref_grads, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)
    with count_saved_tensors(model) as after:
        gpt_loss(model, batch)
    cut = before.result.bytes - after.result.bytes
    assert cut == cfg.n_layer * 4 * 32 * 4 * cfg.n_embd * 4  # 4C fp32 values per token per block


def test_act_linear_rejects_unknown_activation():
    with pytest.raises(ValueError, match="gelu_tanh"):
        act_linear(torch.randn(2, 3), torch.randn(4, 3), activation="relu6")
