"""Graph inspection: fx first, torch.export on fx failure; shapes and FLOPs per node; graph breaks."""

from __future__ import annotations

import torch
from torch import nn

from torchsmith.debug.graph import capture_inputs, inspect_graph


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class _ShapeCheck(_MLP):
    def forward(self, x):
        if x.shape[1] != 16:  # Python control flow on a shape: fx cannot trace it, export can
            raise ValueError("bad width")
        return super().forward(x)


class _Breaks(_MLP):
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if h.sum().item() > -1.0:  # data-dependent Python branch: a graph break for torch.compile
            h = h * 2
        return self.fc2(h)


def test_fx_trace_with_shapes_and_linear_flops():
    x = torch.randn(8, 16)
    report = inspect_graph(_MLP(), (x,))
    assert report.tracer == "torch.fx.symbolic_trace" and report.fx_error is None
    by_target = {n.target: n for n in report.nodes}
    assert by_target["fc1"].shapes == [[8, 32]] and by_target["fc2"].shapes == [[8, 4]]
    assert by_target["fc1"].flops == 2 * 8 * 16 * 32 and by_target["fc2"].flops == 2 * 8 * 32 * 4
    assert report.total_flops == 2 * 8 * (16 * 32 + 32 * 4)
    assert report.graph_count == 1 and report.graph_breaks == []


def test_falls_back_to_export_and_says_why():
    report = inspect_graph(_ShapeCheck(), (torch.randn(8, 16),), explain=False)
    assert report.tracer == "torch.export" and "control flow" in report.fx_error
    assert report.total_flops == 2 * 8 * (16 * 32 + 32 * 4)
    assert [8, 4] in [s for n in report.nodes for s in n.shapes]


def test_graph_breaks_are_counted_with_reasons():
    report = inspect_graph(_Breaks(), (torch.randn(8, 16),), explain=True)
    # Neither fx nor export can trace a branch on a value; both failures are reported.
    assert report.tracer is None and report.fx_error and report.export_error and report.nodes == []
    assert report.graph_count >= 2 and report.graph_breaks
    assert any("item" in b.reason.lower() or "scalar" in b.reason.lower() or "data dependent" in b.reason.lower()
               for b in report.graph_breaks), report.graph_breaks


def test_capture_inputs_from_a_loss_function():
    model = _MLP()
    x = torch.randn(3, 16)
    args, kwargs = capture_inputs(model, lambda m, b: m(b).sum(), x)
    assert args[0] is x and kwargs == {}
