"""The NaN/Inf sentinel names the exact module and op; Plan.nonfinite raise/skip_step/warn."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.debug.nan_sentinel import NaNSentinel, NonFiniteError, locate
from torchsmith.engine.step import prepare
from torchsmith.plan import Plan
from torchsmith.workloads import gpt_mini


def _tiny_gpt():
    w = gpt_mini.workload(n_layer=3, n_embd=32, n_head=4, block_size=16, batch_size=4, batches_per_epoch=2)
    torch.manual_seed(0)
    return w, w.model(), next(iter(w.iter_batches()))


def _inject_nan(module: nn.Module):
    def hook(mod, args, out):  # (B, T, 4C): one NaN at a fixed place, in the layer's own output
        mask = torch.zeros_like(out, dtype=torch.bool)
        mask[0, 3, 5] = True
        return out.masked_fill(mask, float("nan"))
    return module.register_forward_hook(hook)


def test_names_gpt_layer_and_op_in_forward():
    w, model, batch = _tiny_gpt()
    _inject_nan(model.blocks[1].mlp.c_fc)
    with NaNSentinel(model) as sentinel:
        assert sentinel.watch(lambda: w.loss(model, batch).backward()) is not None  # warm: flags read
        model.zero_grad()
        cheap = sentinel.check(w.loss(model, batch))
    assert cheap.module == "blocks.1.mlp.c_fc" and cheap.op is None  # module level, one sync
    model.zero_grad()
    found = NaNSentinel(model).watch(lambda: w.loss(model, batch).backward())
    assert found.module == "blocks.1.mlp.c_fc"
    assert found.op == "aten.masked_fill.Scalar"
    assert found.pass_ == "forward" and found.kind == "nan" and found.inputs_finite is True
    assert found.output_shapes == [[4, 16, 128]] and found.step == 1


class _BadBackward(torch.autograd.Function):
    """y = 2x, but backward takes the log of a negative number: NaN in backward only."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.log(-(x.abs() + 1))


class _Scale(nn.Module):
    def forward(self, x):
        return _BadBackward.apply(x)


def _bad_backward_model() -> nn.Module:
    """inp -> body(tanh, _Scale whose backward makes NaN, linear) -> out."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("inp", nn.Linear(6, 8))
    model.add_module("body", nn.Sequential(nn.Tanh(), _Scale(), nn.Linear(8, 8)))
    model.add_module("out", nn.Linear(8, 1))
    return model


def test_names_module_and_op_in_custom_function_backward():
    model = _bad_backward_model()
    x = torch.randn(5, 6)
    loss = model(x).pow(2).mean()
    assert torch.isfinite(loss)  # forward is clean
    found = locate(model, lambda: model(x).pow(2).mean().backward())
    assert found.module == "body.1" and found.pass_ == "backward"
    assert found.op == "aten.log.default" and found.autograd_node == "_BadBackwardBackward"
    assert found.inputs_finite is True and found.output_shapes == [[5, 8]]
    # The same through the sentinel: module-level checks see only non-finite gradients, the
    # op-level re-run names the culprit; the re-run leaves the step's gradients as they were.
    model.zero_grad()
    with NaNSentinel(model) as sentinel:
        watched = sentinel.watch(lambda: model(x).pow(2).mean().backward())
    assert (watched.module, watched.op, watched.pass_, watched.step) == ("body.1", "aten.log.default", "backward", 1)
    assert torch.isnan(model.inp.weight.grad).all()


def _overflow_model():
    torch.manual_seed(0)
    model = nn.Sequential()
    for name, layer in [("fc1", nn.Linear(8, 16)), ("act", nn.ReLU()), ("fc2", nn.Linear(16, 16)),
                        ("act2", nn.ReLU()), ("head", nn.Linear(16, 1))]:
        model.add_module(name, layer)
    return model


def _mse(m, b):
    return F.mse_loss(m(b[0]), b[1])


def test_names_overflow_from_huge_learning_rate():
    model = _overflow_model()
    step = prepare(Plan(nonfinite="raise"), model, torch.optim.SGD(model.parameters(), lr=1e18), _mse)
    batch = (torch.randn(32, 8), torch.randn(32, 1))
    assert torch.isfinite(step(batch))  # step 1 is fine, and leaves weights ~1e17
    with pytest.raises(NonFiniteError, match=r"step 2: module head in op aten\.addmm"):
        step(batch)  # ~1e17 * ~1e17 overflows float32 in the head's matmul
    found = step.parts.nonfinite.findings[-1]
    assert (found.module, found.op, found.pass_, found.inputs_finite) == ("head", "aten.addmm.default", "forward", True)


def _state_copy(opt):
    return copy.deepcopy(opt.state_dict())


def test_skip_step_leaves_params_and_optimizer_state_unchanged():
    model = _overflow_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = prepare(Plan(nonfinite="skip_step"), model, opt, _mse)
    good = (torch.randn(32, 8), torch.randn(32, 1))
    step(good)  # AdamW now has state (step, exp_avg, exp_avg_sq)
    params = [p.detach().clone() for p in model.parameters()]
    state = _state_copy(opt)
    bad = (good[0].clone(), good[1].clone())
    bad[0][3, 2] = float("inf")
    with pytest.warns(RuntimeWarning, match="optimizer step skipped"):
        step(bad)
    assert all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))
    after = _state_copy(opt)
    for key, st in state["state"].items():
        assert all(torch.equal(st[k], after["state"][key][k]) for k in st)
    assert all(p.grad is None for p in model.parameters())
    found = step.parts.nonfinite.findings[0]
    assert found.module == "fc1" and found.inputs_finite is False and step.parts.nonfinite.skipped == 1
    step(good)  # training goes on
    assert not all(torch.equal(a, b) for a, b in zip(params, model.parameters(), strict=True))


def test_warn_mode_steps_anyway_and_off_mode_checks_nothing():
    model = _overflow_model()
    step = prepare(Plan(nonfinite="warn"), model, torch.optim.SGD(model.parameters(), lr=0.1), _mse)
    bad = (torch.randn(4, 8), torch.full((4, 1), float("nan")))
    with pytest.warns(RuntimeWarning, match="non-finite step"):
        step(bad)
    assert all(torch.isnan(p).any() for p in (model.head.weight,))  # the step was taken
    model = _overflow_model()
    step = prepare(Plan(), model, torch.optim.SGD(model.parameters(), lr=0.1), _mse)
    assert step.parts.nonfinite is None
    assert torch.isnan(step(bad))


def test_plan_knobs_round_trip_and_validate():
    plan = Plan(nonfinite="skip_step", auto_microbatch=True)
    assert Plan.from_dict(json_round_trip(plan.to_dict())) == plan
    assert Plan().nonfinite is None and Plan().auto_microbatch is False
    with pytest.raises(ValueError, match="nonfinite"):
        Plan(nonfinite="ignore")


def json_round_trip(data):
    import json

    return json.loads(json.dumps(data))


def test_gradient_check_sees_the_optimizers_fp32_masters_under_bf16_parameters():
    # BF16Params moves gradients to fp32 master copies held by the optimizer: the check must
    # read those, or a NaN gradient would reach the update unseen.
    from torchsmith.plan import BF16Params

    model = _bad_backward_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = prepare(Plan(precision=BF16Params(), nonfinite="skip_step"), model, opt,
                   lambda m, b: m(b).float().pow(2).mean())
    masters = [p.detach().clone() for g in opt.param_groups for p in g["params"]]
    with pytest.warns(RuntimeWarning, match="optimizer step skipped"):
        step(torch.randn(5, 6))
    assert step.parts.nonfinite.skipped == 1
    assert all(torch.equal(a, p)
               for a, p in zip(masters, (p for g in opt.param_groups for p in g["params"]), strict=True))


class _LogBetween(nn.Module):
    """A parent whose own forward code makes the NaN: log of a negative number between two children."""

    def __init__(self, only_first_call: bool = False):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)
        self.only_first_call, self.calls = only_first_call, 0

    def forward(self, x):
        self.calls += 1
        h = self.a(x)
        if not self.only_first_call or self.calls == 1:  # Python state: a replay takes the other branch
            h = torch.log(h - 100.0)
        return self.b(h)


def _parent_model(only_first_call: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), _LogBetween(only_first_call))


def test_a_nan_born_in_the_parents_own_code_names_the_parent_and_its_children():
    model = _parent_model()
    found = NaNSentinel(model).watch(lambda: model(torch.randn(3, 4)).sum().backward())
    assert found.module == "1" and found.op == "aten.log.default" and found.inputs_finite is True
    assert found.own_code and found.last_finite_child == "1.a" and found.first_nonfinite_child == "1.b"
    assert found.reproduced is True
    assert "born in 1's own forward code, after child 1.a" in found.describe()


def test_a_nan_the_rerun_does_not_reproduce_keeps_the_cheap_finding_and_says_so():
    model = _parent_model(only_first_call=True)
    found = NaNSentinel(model).watch(lambda: model(torch.randn(3, 4)).sum().backward())
    assert found.module == "1" and found.op is None  # module level: the parent, not child 1.b
    assert found.own_code and found.last_finite_child == "1.a" and found.first_nonfinite_child == "1.b"
    assert found.reproduced is False and "did not reproduce" in found.describe()
