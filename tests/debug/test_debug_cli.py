"""``torchsmith debug ...`` end to end on small workloads."""

from __future__ import annotations

import json
import textwrap

from typer.testing import CliRunner

from torchsmith.cli import app

runner = CliRunner()

WORKLOAD = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from torch import nn
    import torchsmith

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)

        def forward(self, x):
            h = torch.relu(self.fc1(x))
            h = h / (x[:, :1] < 50).float()  # a sample with x[0] >= 50 divides by zero
            return self.fc2(h)

    def workload():
        g = torch.Generator().manual_seed(0)
        xs = torch.randn(64, 4, generator=g)
        xs[37, 0] = 60.0  # in the third batch of 16
        batches = [(xs[i:i + 16], xs[i:i + 16].sum(1, keepdim=True)) for i in range(0, 64, 16)]
        return torchsmith.Workload(model=Net, batches=batches,
                                   loss=lambda m, b: F.mse_loss(m(b[0]), b[1]),
                                   optimizer=lambda p: torch.optim.SGD(p, lr=0.01), name="nan-net")

    class WrongGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x * weight

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            return grad * weight, grad * weight  # the weight's gradient should be grad * x

    def make_inputs():
        return torch.randn(3, 2), torch.randn(3, 2)
''')


def _file(tmp_path):
    path = tmp_path / "wl.py"
    path.write_text(WORKLOAD)
    return path


def test_debug_nan_names_module_op_and_step(tmp_path):
    spec = f"{_file(tmp_path)}:workload"
    out = runner.invoke(app, ["debug", "nan", spec, "--steps", "5", "--device", "cpu", "--json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    f = data["finding"]
    assert data["steps_run"] == 3 and f["step"] == 3 and f["pass"] == "forward"
    assert f["module"] == "" and f["op"] == "aten.div.Tensor" and f["inputs_finite"] is True
    assert f["input_shapes"] == [[16, 8], [16, 1]]
    text = runner.invoke(app, ["debug", "nan", spec, "--steps", "5", "--device", "cpu"])
    assert text.exit_code == 1 and "aten.div.Tensor" in text.output


def test_debug_grads_writes_png_and_html(tmp_path):
    png, html = tmp_path / "g.png", tmp_path / "g.html"
    out = runner.invoke(app, ["debug", "grads", "mlp", "--steps", "3", "--device", "cpu", "--png", str(png),
                              "--report", str(html), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["steps"] == [1, 2, 3] and len(data["grad_norms"][0]) == len(data["layers"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert "data:image/png;base64," in page and data["layers"][0] in page


def test_debug_gradcheck_exit_code_and_named_input(tmp_path):
    path = _file(tmp_path)
    out = runner.invoke(app, ["debug", "gradcheck", f"{path}:WrongGrad", "--inputs", f"{path}:make_inputs", "--json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["wrong"] == ["weight"] and data["kind"] == "autograd.Function"
    out = runner.invoke(app, ["debug", "gradcheck", f"{path}:WrongGrad", "--shapes", "3x2,3x2"])
    assert out.exit_code == 1 and "WRONG" in out.output
    out = runner.invoke(app, ["debug", "gradcheck", f"{path}:WrongGrad"])
    assert out.exit_code == 2 and "--shapes" in out.output


def test_debug_graph_json(tmp_path):
    out = runner.invoke(app, ["debug", "graph", f"{_file(tmp_path)}:workload", "--json", "--no-explain"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["tracer"] == "torch.fx.symbolic_trace"
    assert data["total_flops"] == 2 * 16 * (4 * 8 + 8 * 1)


PARENT_CODE = '''
import torch, torchsmith
import torch.nn.functional as F
from torch import nn

class LogBetween(nn.Module):
    """Its own forward code makes a NaN (log of a negative number) between two children, on its
    third call only: Python state, so the op-level re-run of that step does not reproduce it."""
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.a(x)
        if self.calls == 3:
            h = torch.log(h - 100.0)
        return self.b(h)

def workload():
    torch.manual_seed(0)
    xs = torch.randn(64, 8)
    batches = [(xs[i:i + 16], xs[i:i + 16].sum(1, keepdim=True)) for i in range(0, 64, 16)]
    return torchsmith.Workload(model=lambda: nn.Sequential(nn.Linear(8, 8), LogBetween()), batches=batches,
                               loss=lambda m, b: F.mse_loss(m(b[0]), b[1]),
                               optimizer=lambda p: torch.optim.SGD(p, lr=0.01), name="parent-code")
'''


def test_debug_nan_names_the_parent_whose_own_code_made_the_nan(tmp_path):
    path = tmp_path / "parent_code.py"
    path.write_text(PARENT_CODE)
    out = runner.invoke(app, ["debug", "nan", f"{path}:workload", "--steps", "5", "--device", "cpu", "--json"])
    assert out.exit_code == 1, out.output
    f = json.loads(out.output)["finding"]
    assert f["module"] == "1" and f["own_code"] and f["step"] == 3
    assert f["last_finite_child"] == "1.a" and f["first_nonfinite_child"] == "1.b"
    assert f["reproduced"] is False and f["op"] is None
    text = runner.invoke(app, ["debug", "nan", f"{path}:workload", "--steps", "5", "--device", "cpu"])
    assert "1 (its own forward code)" in text.output and "did not reproduce" in text.output
