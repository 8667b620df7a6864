"""gradcheck / opcheck for a custom ``autograd.Function`` or ``torch.library`` op, per input.

``torch.autograd.gradcheck`` says pass or fail. This also says *which* input's gradient is
wrong and by how much: for each differentiable input, the backward's Jacobian (built row by
row with ``autograd.grad``) against central finite differences, in float64, with the
largest absolute and relative error. Then ``gradcheck``, ``gradgradcheck`` and, for custom
ops, ``torch.library.opcheck`` (schema, fake tensor, autograd registration).

Example::

    report = check_gradients(MyFunction, shapes=[(3, 4), (4,)])
    for g in report.inputs:
        g.name, g.ok, g.max_abs_error
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from torchsmith.text import first_line


@dataclass(frozen=True)
class InputCheck:
    index: int
    name: str
    shape: list[int]
    ok: bool
    max_abs_error: float
    max_rel_error: float
    """max |analytical - numerical| / max |numerical|."""
    worst_element: list[int]
    """Index (into the input) of the worst column: the element whose perturbation disagrees most."""


@dataclass(frozen=True, kw_only=True)
class GradcheckReport:
    target: str
    kind: str
    """"autograd.Function", "custom op" or "callable"."""
    inputs: list[InputCheck]
    gradcheck: bool
    gradgradcheck: bool | None
    """None when not run (first derivatives already wrong)."""
    opcheck: dict[str, str] | None = None
    """For custom ops: test name -> "SUCCESS" / "SKIPPED" / the failure."""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """First derivatives right and opcheck clean. A failed gradgradcheck is reported apart: many
        custom backwards are deliberately once-differentiable (no double backward)."""
        opcheck_ok = self.opcheck is None or all(v in ("SUCCESS", "SKIPPED") for v in self.opcheck.values())
        return self.gradcheck and all(i.ok for i in self.inputs) and opcheck_ok

    @property
    def wrong(self) -> list[str]:
        return [i.name for i in self.inputs if not i.ok]


def _callable(target: Any) -> tuple[Callable, str, list[str] | None]:
    """(function to call, kind, argument names) for a Function class, a custom op or a callable."""
    if isinstance(target, type) and issubclass(target, torch.autograd.Function):
        params = list(inspect.signature(target.forward).parameters)[1:]  # drop ctx
        return target.apply, "autograd.Function", params
    op = _as_op(target)
    if op is not None:
        return target, "custom op", [a.name for a in op._schema.arguments]
    if callable(target):
        try:
            return target, "callable", list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            return target, "callable", None
    raise TypeError(f"expected an autograd.Function subclass, a torch.library custom op or a callable, "
                    f"found {type(target).__name__}.\nTip: point at the class itself (mymod:MyFunction), not .apply.")


def _as_op(target: Any) -> torch._ops.OpOverload | None:
    from torch._library.custom_ops import CustomOpDef

    if isinstance(target, CustomOpDef):
        return target._opoverload
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target.default
    if isinstance(target, torch._ops.OpOverload):
        return target
    return None


def make_inputs(shapes: Sequence[Sequence[int]], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Float64 inputs that require grad, one per declared shape, from a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(tuple(s), generator=g, dtype=torch.float64).requires_grad_() for s in shapes)


def _float_outputs(out: Any) -> list[torch.Tensor]:
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]


def _jacobians(fn: Callable, args: tuple, i: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(analytical, numerical) Jacobian of the differentiable outputs w.r.t. input ``i``:
    (outputs numel, input numel)."""
    x = args[i]
    outs = _float_outputs(fn(*args))
    keep = [k for k, o in enumerate(outs) if o.requires_grad]  # e.g. a custom op's auxiliary outputs do not
    flat = torch.cat([outs[k].reshape(-1) for k in keep]) if keep else torch.zeros(0, dtype=torch.float64)
    analytical = torch.zeros(flat.numel(), x.numel(), dtype=torch.float64)
    for r in range(flat.numel()):  # one vector-Jacobian product per output element, via the backward
        (g,) = torch.autograd.grad(flat[r], x, retain_graph=True, allow_unused=True)
        if g is not None:
            analytical[r] = g.reshape(-1)
    numerical = torch.zeros_like(analytical)
    with torch.no_grad():
        base = x.detach().clone()
        for c in range(x.numel()):
            values = []
            for sign in (1, -1):
                moved = base.clone().reshape(-1)
                moved[c] += sign * eps
                moved_args = tuple(moved.view_as(base) if k == i else a for k, a in enumerate(args))
                outs = _float_outputs(fn(*moved_args))
                values.append(torch.cat([outs[k].reshape(-1) for k in keep]) if keep else torch.zeros(0))
            numerical[:, c] = (values[0] - values[1]) / (2 * eps)
    return analytical, numerical


def check_gradients(target: Any, inputs: Sequence[Any] | None = None, *, shapes: Sequence[Sequence[int]] | None = None,
                    eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, name: str | None = None,
                    max_numel: int = 4096, opcheck: bool = True) -> GradcheckReport:
    """Check ``target``'s backward against finite differences, input by input.

    ``inputs``: example arguments (floating tensors are converted to float64); or ``shapes``:
    one random float64 tensor per shape. Inputs that do not require grad are passed through.
    ``opcheck=False`` skips ``torch.library.opcheck`` for custom ops (it traces the op several ways).

    Example::

        report = check_gradients(MyFunction, shapes=[(3, 4), (4,)])
        assert report.ok, report.wrong      # e.g. ['weight']
    """
    fn, kind, names = _callable(target)
    if inputs is None:
        if shapes is None:
            raise ValueError(f"no inputs for {name or target!r}: give example inputs or the input shapes.\n"
                             "Tip: --inputs mymod:make_inputs (a function returning a tuple of tensors) "
                             "or --shapes 3x4,4")
        args = make_inputs(shapes)
    else:
        args = tuple(a.detach().to(torch.float64).requires_grad_()
                     if isinstance(a, torch.Tensor) and a.is_floating_point()
                     else a for a in inputs)
    diff = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    too_big = [i for i in diff if args[i].numel() > max_numel]
    if too_big:
        raise ValueError(f"input {too_big[0]} has {args[too_big[0]].numel()} elements; finite differences need "
                         f"2 forward calls per element, so the limit is {max_numel}.\nTip: use smaller example inputs.")
    checks = []
    for i in diff:
        a, n = _jacobians(fn, args, i, eps)
        err = (a - n).abs()
        max_abs = float(err.max()) if err.numel() else 0.0
        scale = float(n.abs().max()) if n.numel() else 0.0
        worst = int(err.max(0).values.argmax()) if err.numel() else 0
        idx = list(torch.unravel_index(torch.tensor(worst), args[i].shape)) if args[i].dim() else []
        checks.append(InputCheck(
            index=i, name=(names[i] if names and i < len(names) else f"input {i}"), shape=list(args[i].shape),
            ok=bool(torch.allclose(a, n, atol=atol, rtol=rtol)), max_abs_error=max_abs,
            max_rel_error=max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf")),
            worst_element=[int(v) for v in idx]))
    notes: list[str] = []
    gc_ok = torch.autograd.gradcheck(fn, args, eps=eps, atol=atol, rtol=rtol, raise_exception=False)
    ggc_ok = None
    if gc_ok:
        try:
            ggc_ok = torch.autograd.gradgradcheck(fn, args, eps=eps, atol=atol, rtol=rtol, raise_exception=False)
        except RuntimeError as err:  # e.g. a backward marked once_differentiable
            ggc_ok = False
            notes.append(f"gradgradcheck: {first_line(err)}")
        if not ggc_ok:
            notes.append("second derivatives are wrong or missing: fine unless you need double backward "
                         "(gradient penalties, Hessian-vector products)")
    op = _as_op(target)
    op_results = torch.library.opcheck(op, args, raise_exception=False) if op is not None and opcheck else None
    return GradcheckReport(target=name if name else getattr(target, "__name__", repr(target)), kind=kind, inputs=checks,
                           gradcheck=bool(gc_ok), gradgradcheck=ggc_ok, opcheck=op_results, notes=notes)
