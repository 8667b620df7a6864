"""Tiny models and exact comparisons shared by the transform tests (kept small: 2 shared cores)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.workloads.cnn_mini import ResNetMini
from torchsmith.workloads.gpt_model import GPT, GPTConfig

VOCAB = 16


def tiny_gpt(n_layer: int = 4, n_embd: int = 32, block_size: int = 32, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=block_size, n_layer=n_layer, n_head=2, n_embd=n_embd))


def gpt_batch(batch: int = 4, seq: int = 32, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (batch, seq + 1), generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()  # (B, T) each


def gpt_loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def tiny_cnn(seed: int = 0) -> ResNetMini:
    torch.manual_seed(seed)
    return ResNetMini(widths=(8, 16), blocks_per_stage=1)


def cnn_batch(batch: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g)


def cnn_loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def grads_of(model: nn.Module, loss_fn, batch) -> dict[str, torch.Tensor]:
    """Gradients of one forward/backward, keyed by parameter name (the model's grads are cleared after)."""
    model.zero_grad(set_to_none=True)
    loss_fn(model, batch).backward()
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def max_rel_error(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    assert got.keys() == want.keys()
    return max(((got[k].float() - want[k].float()).norm() / want[k].float().norm().clamp_min(1e-12)).item()
               for k in want)


def structure(model: nn.Module) -> list:
    """Everything a transform could leave behind: module types, instance attributes, hooks,
    compile wrappers, in-place flags, and each parameter/buffer's identity, dtype, shape and strides."""
    out: list = []
    for name, m in model.named_modules():
        out.append((name, type(m).__name__, sorted(k for k in m.__dict__ if k != "training"),
                    len(m._forward_pre_hooks), len(m._forward_hooks), len(m._backward_hooks),
                    len(m._state_dict_hooks), len(m._load_state_dict_pre_hooks),
                    m._compiled_call_impl is None, getattr(m, "inplace", None)))
        for pname, p in list(m._parameters.items()) + list(m._buffers.items()):
            if p is not None:
                out.append((name, pname, id(p), p.dtype, tuple(p.shape), p.stride(),
                            len(getattr(p, "_post_accumulate_grad_hooks", None) or {})))
    return out


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_state_equal(before: dict[str, torch.Tensor], model: nn.Module) -> None:
    after = model.state_dict()
    assert list(after) == list(before)
    for k, v in before.items():
        assert after[k].dtype == v.dtype and after[k].stride() == v.stride(), k
        assert torch.equal(after[k], v), k


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tests run single-threaded: on a shared 2-core machine, OpenMP's spinning threads make tiny
    ops ~100x slower under contention. Every invariant tested here is thread-count independent.
    Import this fixture into each test module (autouse applies it there)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
