"""check_gradients passes a correct backward and names the input whose gradient is wrong."""

from __future__ import annotations

import torch

from torchsmith.debug.gradcheck import check_gradients


class GoodAffine(torch.autograd.Function):
    """y = sin(x) * w + b, broadcast over rows: x (N, D), w (D,), b (D,)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.sin(x) * weight + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad * torch.cos(x) * weight, (grad * torch.sin(x)).sum(0), grad.sum(0)


class WrongWeightGrad(GoodAffine):
    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        # Bug: cos instead of sin in the weight's gradient; x and bias stay right.
        return grad * torch.cos(x) * weight, (grad * torch.cos(x)).sum(0), grad.sum(0)


SHAPES = [(3, 4), (4,), (4,)]


def test_correct_function_passes_every_check():
    report = check_gradients(GoodAffine, shapes=SHAPES)
    assert report.ok and report.gradcheck and report.gradgradcheck
    assert [i.name for i in report.inputs] == ["x", "weight", "bias"]
    assert max(i.max_abs_error for i in report.inputs) < 1e-6


def test_wrong_backward_is_caught_and_the_input_named():
    report = check_gradients(WrongWeightGrad, shapes=SHAPES)
    assert not report.ok and not report.gradcheck
    assert report.wrong == ["weight"]
    bad = report.inputs[1]
    assert bad.max_abs_error > 0.1 and bad.max_rel_error > 0.1
    assert report.inputs[0].max_abs_error < 1e-6 and report.inputs[2].max_abs_error < 1e-6


def _custom_op(ns_name, wrong):
    @torch.library.custom_op(ns_name, mutates_args=())
    def scaled_square(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x * x * s

    @scaled_square.register_fake
    def _(x, s):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        gx = grad * (x if wrong else 2 * x) * s  # the bug: forgets the factor 2
        return gx, (grad * x * x).sum_to_size(s.shape)

    scaled_square.register_autograd(backward, setup_context=setup)
    return scaled_square


def test_custom_op_runs_opcheck_and_names_the_wrong_input():
    good = check_gradients(_custom_op("tstest::sq_good", wrong=False), shapes=[(5,), (5,)])
    assert good.ok and good.kind == "custom op" and good.opcheck
    assert all(v in ("SUCCESS", "SKIPPED") for v in good.opcheck.values())
    bad = check_gradients(_custom_op("tstest::sq_bad", wrong=True), shapes=[(5,), (5,)], opcheck=False)
    assert bad.kind == "custom op" and bad.wrong == ["x"]
    assert bad.inputs[0].max_rel_error > 0.3  # half the true gradient: relative error 0.5


class PowWithAux(torch.autograd.Function):
    """(x ** k, argmax index as float): a non-tensor argument and a non-differentiable output."""

    @staticmethod
    def forward(ctx, x, k: int):
        ctx.save_for_backward(x)
        ctx.k = k
        aux = x.detach().abs().argmax().to(x.dtype).expand(3).clone()
        ctx.mark_non_differentiable(aux)
        return x ** k, aux

    @staticmethod
    def backward(ctx, grad, _grad_aux):
        (x,) = ctx.saved_tensors
        return grad * ctx.k * x ** (ctx.k - 1), None


def test_non_tensor_arguments_and_non_differentiable_outputs():
    report = check_gradients(PowWithAux, (torch.randn(4), 3))
    assert report.ok and [i.name for i in report.inputs] == ["x"] and report.inputs[0].max_abs_error < 1e-6
