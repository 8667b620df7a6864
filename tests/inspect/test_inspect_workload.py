"""inspect: FLOPs, parameters, saved bytes and memory split measured on the mlp workload."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from torchsmith.inspect import capture_inputs, inspect_workload, trace_shapes
from torchsmith.workload import load_workload


@pytest.fixture(scope="module")
def mlp_result():
    return inspect_workload(load_workload("mlp"), device="cpu")


def test_flops_match_the_matmul_arithmetic(mlp_result):
    # mlp: batch 256, 32 -> 256 -> 256 -> 256 -> 4. A Linear's forward is 2*B*in*out FLOPs;
    # backward is twice that (d_input and d_weight) except the first layer, whose input needs no grad.
    B, dims = 256, [(32, 256), (256, 256), (256, 256), (256, 4)]
    fwd = [2 * B * i * o for i, o in dims]
    assert mlp_result.forward_flops == sum(fwd)
    assert mlp_result.backward_flops == 2 * sum(fwd) - fwd[0]
    rows = {r.path: r for r in mlp_result.modules}
    assert rows["blocks.1.linear"].forward_flops == fwd[1]
    assert rows["blocks.1.linear"].backward_flops == 2 * fwd[1]
    assert rows["blocks.0.linear"].backward_flops == fwd[0]
    assert rows[""].forward_flops == mlp_result.forward_flops


def test_parameters_per_module_add_up(mlp_result):
    rows = {r.path: r for r in mlp_result.modules}
    assert rows[""].params == mlp_result.params == 141060
    assert rows["blocks"].params + rows["head"].params == rows[""].params
    assert rows["blocks.0.linear"].params == 32 * 256 + 256


def test_fx_traces_the_mlp_with_shapes(mlp_result):
    assert mlp_result.graph.method == "fx"
    assert mlp_result.graph.module_shapes["head"] == "(256, 4)"
    assert mlp_result.graph.module_shapes["blocks.0"] == "(256, 256)"  # filled in by hooks: fx inlines it
    assert any(n.op == "call_module" and n.shape == "(256, 256)" for n in mlp_result.graph.nodes)


def test_saved_bytes_per_module(mlp_result):
    rows = {r.path: r for r in mlp_result.modules}
    # Each hidden layer keeps one (256, 256) fp32 ReLU output; the first Linear keeps its (256, 32) input.
    assert rows["blocks"].saved_bytes == 3 * 256 * 256 * 4 + 256 * 32 * 4
    assert rows[""].saved_bytes + mlp_result.saved_outside_modules == mlp_result.saved_bytes


def test_memory_estimate_is_close_to_the_measured_peak(mlp_result):
    m = mlp_result.memory
    assert m.parameters == m.gradients == 141060 * 4
    assert m.optimizer_state >= 2 * m.parameters  # AdamW: exp_avg and exp_avg_sq per parameter
    assert m.activations == mlp_result.saved_bytes
    # Parameters and optimizer state are alive for the whole step, so the peak cannot be below them.
    assert m.measured_peak >= m.parameters + m.optimizer_state
    assert 0.6 < m.peak_over_estimate < 1.5, (m.measured_peak, m.estimate)


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] > 1:  # Python control flow on a traced value: symbolic tracing fails
            x = x * 2
        return self.lin(x)


def test_untraceable_model_falls_back_to_hooks_with_the_reason():
    model = _Branchy()
    args, kwargs = capture_inputs(model, lambda m, b: m(b).sum(), torch.randn(4, 8))
    info = trace_shapes(model, args, kwargs)
    assert info.method == "hooks"
    assert "symbolic_trace failed" in info.note
    assert info.module_shapes == {"": "(4, 8)", "lin": "(4, 8)"}
    assert info.nodes == []


def test_gpt_mini_model_does_not_trace_and_says_why():
    from torchsmith.workloads.gpt_model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16))
    idx = torch.zeros(2, 8, dtype=torch.long)
    info = trace_shapes(model, *capture_inputs(model, lambda m, b: m(b).sum(), idx))
    assert info.method == "hooks" and "control flow" in info.note
    assert info.module_shapes["blocks.0.attn"] == "(2, 8, 16)"


def test_inspect_json_command():
    from torchsmith.cli import app

    out = CliRunner().invoke(app, ["inspect", "mlp", "--json", "--depth", "1"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout[out.stdout.index("{"):])
    assert data["graph"]["method"] == "fx"
    assert {m["path"] for m in data["modules"]} == {"", "blocks", "head"}
    assert data["memory"]["estimate"] == sum(data["memory"][k] for k in
                                             ("parameters", "gradients", "optimizer_state", "activations"))
