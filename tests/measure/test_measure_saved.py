"""Saved-tensor bytes: exact for known ops, deduplicated by storage, split by module."""

import torch
from torch import nn

from torchsmith.measure.saved import OUTSIDE_MODULES, count_saved_tensors

B, IN, OUT = 32, 64, 16


def test_linear_saves_exactly_its_input():
    layer = nn.Linear(IN, OUT)
    x = torch.randn(B, IN)
    with count_saved_tensors(layer) as saved:
        layer(x)
    r = saved.result
    assert r.bytes == B * IN * 4 and r.count == 1
    assert r.param_bytes == 0  # x needs no grad, so the weight is not needed in backward
    assert r.by_module == {"": B * IN * 4}


def test_saved_parameters_are_not_activations():
    layer = nn.Linear(IN, OUT)
    x = torch.randn(B, IN, requires_grad=True)  # now d_input needs the weight
    with count_saved_tensors() as saved:  # no model: recognised as a Parameter view
        layer(x)
    r = saved.result
    assert r.bytes == B * IN * 4
    assert r.param_bytes == IN * OUT * 4 and r.param_count == 1
    assert r.by_module is None


def test_relu_saves_its_output():
    x = torch.randn(B, IN, requires_grad=True)
    with count_saved_tensors() as saved:
        y = torch.relu(x)
    assert saved.result.bytes == B * IN * 4
    assert saved.result.packs == 1
    del y


def test_shared_tensor_counts_once():
    # ReLU saves its output; the next Linear saves the same tensor as its input.
    model = nn.Sequential(nn.Linear(IN, 128), nn.ReLU(), nn.Linear(128, OUT))
    x = torch.randn(B, IN)
    with count_saved_tensors(model) as saved:
        model(x)
    r = saved.result
    assert r.bytes == B * IN * 4 + B * 128 * 4
    assert r.count == 2
    assert r.packs > r.count + r.param_count  # the dedup did something
    assert r.by_module == {"0": B * IN * 4, "1": B * 128 * 4}


def test_nested_modules_attribute_to_innermost():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(IN, IN)

        def forward(self, x):
            return self.inner(x).tanh()  # tanh belongs to the block, not to `inner`

    model = nn.Sequential(Block())
    x = torch.randn(B, IN)
    with count_saved_tensors(model) as saved:
        out = model(x).sum()
        loss = (out * out)  # outside any module
    r = saved.result
    assert r.by_module["0.inner"] == B * IN * 4  # its input
    assert r.by_module["0"] == B * IN * 4  # tanh output
    assert r.by_module[OUTSIDE_MODULES] > 0
    assert sum(r.by_module.values()) == r.bytes
    del loss


def test_hooks_removed_and_backward_still_works():
    model = nn.Sequential(nn.Linear(IN, OUT), nn.ReLU())
    x = torch.randn(B, IN)
    with count_saved_tensors(model) as saved:
        loss = model(x).sum()
    loss.backward()
    assert model[0].weight.grad is not None
    assert not model[0]._forward_hooks and not model[0]._forward_pre_hooks
    assert saved.result.bytes > 0
