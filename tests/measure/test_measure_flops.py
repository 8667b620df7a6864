"""FLOPs against the matmul formula, split into forward and backward."""

import torch
from torch import nn

from torchsmith.measure.flops import count_flops

B, IN, OUT = 8, 64, 32


def test_linear_forward_and_backward_match_formula():
    layer = nn.Linear(IN, OUT)
    x = torch.randn(B, IN, requires_grad=True)
    stats = count_flops(lambda: layer(x).sum().backward())
    assert stats.forward == 2 * B * IN * OUT
    assert stats.backward == 4 * B * IN * OUT  # d_input and d_weight
    assert stats.total == stats.forward + stats.backward


def test_backward_without_input_grad_is_half():
    layer = nn.Linear(IN, OUT)
    x = torch.randn(B, IN)  # no d_input: only d_weight
    stats = count_flops(lambda: layer(x).sum().backward())
    assert stats.backward == 2 * B * IN * OUT


def test_forward_only_has_no_backward():
    layer = nn.Linear(IN, OUT)
    stats = count_flops(layer, torch.randn(B, IN))
    assert stats.backward == 0 and stats.total == stats.forward == 2 * B * IN * OUT


def test_by_module_uses_model_paths():
    model = nn.Sequential(nn.Linear(IN, 128), nn.ReLU(), nn.Linear(128, OUT))
    x = torch.randn(B, IN)
    stats = count_flops(lambda: model(x).sum().backward(), model=model)
    first = 2 * B * IN * 128 * 2  # forward + d_weight (x needs no grad)
    second = 2 * B * 128 * OUT * 3  # forward + d_input + d_weight
    assert stats.by_module == {"": first + second, "0": first, "2": second}
    assert stats.total == first + second
