"""GradMonitor names the vanishing layers of a deep sigmoid MLP and a layer whose gradient explodes."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.debug.grad_monitor import GradMonitor


def _train(model, monitor_kwargs=None, steps=6, lr=1e-3, on_step=None):
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    monitor = GradMonitor(model, optimizer=opt, **(monitor_kwargs or {}))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    for step in range(1, steps + 1):
        if on_step:
            on_step(step)
        noise = 0.05 * torch.randn_like(x)
        F.mse_loss(model(x + noise), y).backward()
        opt.step()
        opt.zero_grad()
    monitor.close()
    return monitor.report()


def _mlp(depth, act):
    torch.manual_seed(0)
    model = nn.Sequential()
    width = 16
    for i in range(depth):
        model.add_module(f"fc{i}", nn.Linear(width, width))
        model.add_module(f"act{i}", act())
    model.add_module("head", nn.Linear(width, 1))
    return model


def test_deep_sigmoid_mlp_vanishing_layers_are_the_input_side():
    report = _train(_mlp(12, nn.Sigmoid))
    assert len(report.steps) == 6 and report.layers[0] == "fc0" and report.layers[-1] == "head"
    vanishing = report.flagged("vanishing")
    assert "fc0" in vanishing and "fc1" in vanishing
    assert "head" not in vanishing and "fc11" not in vanishing
    # Gradients vanish towards the input: the flagged layers are a prefix of the stack.
    assert vanishing == report.layers[:len(vanishing)]
    assert not report.flagged("exploding")


def test_healthy_shallow_relu_mlp_has_no_flags():
    report = _train(_mlp(3, nn.ReLU))
    assert report.flags == []


class _EqualizedLinear(nn.Module):
    """A Linear whose weight is stored scaled down by ``gain`` (as in equalized learning rate):
    the forward pass is unchanged by the gain, but the weight's gradient grows by it."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / math.sqrt(n))
        self.register_buffer("gain", torch.ones(()))

    def forward(self, x):
        return x @ (self.weight * self.gain).t()


def test_exploding_layer_is_named_at_its_spike():
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("inp", nn.Linear(16, 16))
    model.add_module("act", nn.Tanh())
    model.add_module("boom", _EqualizedLinear(16))
    model.add_module("head", nn.Linear(16, 1))

    def rescale(step):
        if step == 7:  # same function, 1000x larger weight gradient from here on
            with torch.no_grad():
                model.boom.weight /= 1000
                model.boom.gain.fill_(1000)

    report = _train(model, steps=9, lr=1e-4, on_step=rescale)
    exploding = [f for f in report.flags if f.kind == "exploding"]
    # boom alone at step 7; its 1000x-too-large update then blows up the others at step 8.
    first = min(f.step for f in exploding)
    assert first == 7 and {f.layer for f in exploding if f.step == first} == {"boom"}
    exploding = [f for f in exploding if f.layer == "boom"]
    assert exploding[0].step == 7 and exploding[0].value > 100 * report.grad_norms[5][report.layers.index("boom")]


def test_every_n_records_one_in_n_and_layers_without_grad_are_flagged():
    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp(2, nn.ReLU)
            self.unused = nn.Linear(16, 16)  # registered but never called

        def forward(self, x):
            return self.net(x)

    model = WithUnused()
    report = _train(model, {"every": 3}, steps=7)
    assert report.steps == [1, 4, 7]
    assert report.flagged("no_grad") == ["unused"]
    assert all(math.isnan(row[report.layers.index("unused")]) for row in report.grad_norms)
    # Recorded norms equal the norms computed directly.
    model2 = _mlp(1, nn.ReLU)
    x = torch.randn(8, 16)
    monitor = GradMonitor(model2)
    model2(x).sum().backward()
    monitor.record()
    expect = torch.cat([model2.fc0.weight.grad.flatten(), model2.fc0.bias.grad.flatten()]).norm().item()
    assert math.isclose(monitor.report().grad_norms[0][0], expect, rel_tol=1e-5)


class _CountOps(__import__("torch.utils._python_dispatch", fromlist=["TorchDispatchMode"]).TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_hooks_add_no_op_to_backward_and_record_cost_does_not_grow_with_parameters():
    def backward_ops(model, monitored):
        monitor = GradMonitor(model) if monitored else None
        x = torch.randn(4, 16)
        with _CountOps() as counter:
            model(x).sum().backward()
        model.zero_grad()
        if monitor:
            monitor.close()
        return counter.ops

    model = _mlp(3, nn.ReLU)
    assert backward_ops(model, True) == backward_ops(model, False)  # hooks only note arrival

    def record_ops(depth):
        model = _mlp(depth, nn.ReLU)
        monitor = GradMonitor(model)
        model(torch.randn(4, 16)).sum().backward()
        with _CountOps() as counter:
            monitor.record()
        return len(counter.ops)

    assert record_ops(2) == record_ops(12)  # multi-tensor norms: op count independent of parameter count
