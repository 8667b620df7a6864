"""In-process capture: the window follows the schedule, facts come from live objects, hooks go after."""

import json

import pytest
import torch
from torch import nn
from torch.optim import optimizer as optim_module

from torchsmith.profile.capture import CaptureConfig, StepCapture


def _train(steps, set_to_none, foreach=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=foreach)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_window_records_active_steps_and_sees_zero_filled_grads(tmp_path, set_to_none):
    hooks_before = len(optim_module._global_optimizer_post_hooks)
    cfg = CaptureConfig(wait=1, warmup=1, active=2)
    with StepCapture(cfg, tmp_path) as cap:
        _train(cfg.steps_needed + 3, set_to_none)
    f = cap.facts
    assert f.window_done and f.steps_seen == cfg.steps_needed and f.steps_recorded == 2
    assert len(f.unprofiled_step_seconds) == cfg.wait and f.unprofiled_step_seconds[0] > 0
    assert len(optim_module._global_optimizer_post_hooks) == hooks_before  # hooks removed after the window
    trace = json.loads(cap.trace_path.read_text())
    assert sum(e["name"].startswith("ProfilerStep#") for e in trace["traceEvents"]) == 2
    assert f.grad_checks >= 1
    assert (f.grads_zero_filled > 0) is (not set_to_none)
    assert f.optimizers[0]["name"] == "SGD" and f.model == "Sequential"
    assert f.param_numel_by_dtype == {"float32": 16 * 32 + 32 + 32 + 1}
    assert f.memory["params"] == 4 * (16 * 32 + 32 + 32 + 1)
    assert json.loads((tmp_path / "facts.json").read_text())["steps_recorded"] == 2


def test_a_short_run_keeps_a_partial_window(tmp_path):
    cfg = CaptureConfig(wait=1, warmup=0, active=5)
    with StepCapture(cfg, tmp_path) as cap:
        _train(4, True)  # 1 first + 1 wait + 2 of 5 recorded steps
    assert not cap.facts.window_done and cap.facts.steps_recorded == 2
    assert cap.trace_path.exists()


def test_window_bounds_are_checked():
    with pytest.raises(ValueError, match="active <= 20"):
        CaptureConfig(active=21)


@pytest.mark.slow
def test_compiled_regions_are_seen_and_hooks_do_not_break_compile(tmp_path):
    from torchsmith.profile.analysis import analyse_trace

    torch.manual_seed(0)
    model = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    cfg = CaptureConfig(active=2)
    with StepCapture(cfg, tmp_path) as cap:
        for _ in range(cfg.steps_needed):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    assert cap.facts.window_done
    assert analyse_trace(cap.trace_path).compiled_regions >= 2  # one per recorded step


def test_two_optimizers_make_one_step_per_loop_cycle_each_with_its_share(tmp_path):
    from torchsmith.profile.analysis import analyse_trace

    torch.manual_seed(0)
    g, d = nn.Linear(8, 8), nn.Linear(8, 1)
    opt_d, opt_g = (torch.optim.Adam(m.parameters(), foreach=True) for m in (d, g))
    cfg = CaptureConfig(wait=1, warmup=1, active=2, probe_threads=False)
    with StepCapture(cfg, tmp_path) as cap:
        for _ in range(cfg.steps_needed):  # one cycle: a D step, then a G step
            x = torch.randn(4, 8)
            d(g(x).detach()).mean().backward()
            opt_d.step()
            opt_d.zero_grad()
            d(g(x)).mean().backward()
            opt_g.step()
            opt_g.zero_grad()
    assert cap.facts.window_done and cap.facts.steps_seen == cfg.steps_needed  # cycles, not optimizer steps
    a = analyse_trace(cap.trace_path)
    assert len(a.steps) == 2 and set(a.optimizer_shares()) == {"#1 Adam", "#2 Adam"}
    assert a.share("forward") > 0 and a.share("backward") > 0
