"""torch.compile(fullgraph=True) of a model using every op: one graph, same numbers as eager."""

import pytest
import torch
from torch import nn

from torchsmith.ops.act_linear import ActLinearMLP
from torchsmith.ops.activations import LeanGELU, LeanSiLU
from torchsmith.ops.linear_cross_entropy import linear_cross_entropy


class TinyLM(nn.Module):
    def __init__(self, vocab=50, width=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.mlp = ActLinearMLP(width, 4 * width, activation="gelu_tanh")
        self.act = nn.Sequential(LeanGELU(), LeanSiLU())
        self.ln = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab)

    def forward(self, idx, targets):
        x = self.wte(idx)  # (B, T, C)
        x = x + self.act(self.mlp(x))
        h = self.ln(x)
        return linear_cross_entropy(h, self.lm_head.weight, targets, self.lm_head.bias, chunk_size=7)


def _loss_and_grads(model, fn, idx, y):
    model.zero_grad(set_to_none=True)
    loss = fn(idx, y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _check_compiled(backend):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TinyLM()
    idx, y = torch.randint(0, 50, (3, 10)), torch.randint(0, 50, (3, 10))
    ref_loss, ref_grads = _loss_and_grads(model, model, idx, y)
    # fullgraph=True turns any graph break into an error: passing means one graph.
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    loss, grads = _loss_and_grads(model, compiled, idx, y)
    torch.testing.assert_close(loss, ref_loss)
    for a, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_compile_fullgraph_aot_eager():
    # aot_eager runs Dynamo, AOTAutograd and the fake implementations, without Inductor's codegen.
    _check_compiled("aot_eager")


@pytest.mark.slow
def test_compile_fullgraph_inductor():
    _check_compiled("inductor")


@pytest.mark.slow
def test_chunked_loss_under_whole_model_compile():
    # apply_compile compiles the model's __call__ in place; the head's pass-through flag must be
    # guarded, so the training call (flag on) and a plain call (flag off) each get the right graph.
    from torchsmith.plan import LossImpl
    from torchsmith.transforms.loss_impl import apply_loss_impl
    from torchsmith.transforms.parts import StepParts
    from torchsmith.workloads.gpt_mini import GPT, GPTConfig, gpt_loss

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=1, n_head=2, n_embd=32))
    batch = (torch.randint(0, 40, (2, 16)), torch.randint(0, 40, (2, 16)))
    ref = gpt_loss(model, batch)
    parts = StepParts(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                      loss_fn=gpt_loss, device=torch.device("cpu"))
    apply_loss_impl(parts, LossImpl(impl="chunked", chunk_size=8))
    model.compile(backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(parts.loss_fn(model, batch), ref)
    assert model(batch[0]).shape == (2, 16, 40)  # logits again outside the chunked loss
    torch.testing.assert_close(parts.loss_fn(model, batch), ref)
