"""Name the first module and op that produced a non-finite value, by re-running a step op by op.

The step is re-run with the same inputs and RNG state under a ``TorchDispatchMode`` that
checks every op's output, forward and backward. Module names come from a stack kept by
forward hooks; in backward, from the autograd node that runs, mapped back to the module whose
forward created it. One sync per op: this runs only on a step already known to be bad, for
``Plan.nonfinite`` (``engine.nonfinite``) and for ``torchsmith.NaNSentinel`` (``debug``).

Example::

    finding = locate(model, lambda: loss_fn(model, batch).backward())
    finding.describe()   # module, op, pass, shapes
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from torchsmith.seeding import rng_state, set_rng_state
from torchsmith.torch_compat import TorchDispatchMode, current_autograd_node, tree_leaves, unwrapped_name

OUTSIDE = "(outside the model)"
"""Module name reported for an op that ran outside every module, e.g. in the loss function."""


@dataclass(frozen=True, kw_only=True)
class NonfiniteOrigin:
    """Where a non-finite value first appeared."""

    module: str
    """Qualified module name (``blocks.2.mlp.c_fc``); ``""`` is the root model."""
    op: str | None
    """The aten op, e.g. ``aten.addmm.default``; None when only module-level checks ran."""
    pass_: str
    """"forward" or "backward"."""
    kind: str
    """"nan", "inf" or "nan+inf"."""
    inputs_finite: bool | None
    """False: an input was already non-finite (the value came from elsewhere, e.g. a parameter)."""
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    autograd_node: str | None = None
    """In backward: the autograd node that ran the op, e.g. ``MyFnBackward``."""
    step: int | None = None
    own_code: bool = False
    """True: the value was born in ``module``'s own forward code, between two of its children
    (the first non-finite child output had non-finite inputs, while ``module``'s were finite)."""
    last_finite_child: str | None = None
    """With ``own_code``: the last child of ``module`` whose output was finite (None: none ran before)."""
    first_nonfinite_child: str | None = None
    """With ``own_code``: the first child whose output was non-finite; its inputs already were."""
    reproduced: bool | None = None
    """False: the op-level re-run of the step found no non-finite value (the forward depends on
    state the replay does not restore), so this is the module-level finding; None: no re-run."""

    def describe(self) -> str:
        where = self.module if self.module else "the root module"
        op = f" in op {self.op}" if self.op else ""
        node = f" (autograd node {self.autograd_node})" if self.autograd_node else ""
        step = f" at step {self.step}" if self.step is not None else ""
        inputs = {True: "its inputs were finite", False: "its inputs were already non-finite",
                  None: "inputs not checked"}[self.inputs_finite]
        text = (f"first {self.kind.upper()} in {self.pass_}{step}: module {where}{op}{node}; "
                f"inputs {self.input_shapes} -> outputs {self.output_shapes}; {inputs}")
        if self.own_code:
            before = (f"after child {self.last_finite_child} (finite output)" if self.last_finite_child
                      else "before any child")
            text += (f"; born in {where}'s own forward code, {before} and before child "
                     f"{self.first_nonfinite_child} (whose inputs were already non-finite)")
        if self.reproduced is False:
            text += ("; the op-level re-run did not reproduce it (the forward depends on state the replay does not "
                     "restore), so no op is named")
        return text

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pass"] = out.pop("pass_")
        return out


# --- cheap checks, one sync per step -------------------------------------------------------------------


def clean_name(name: str) -> str:
    """A module's name as the user wrote it: without torch.compile's and checkpointing's wrapper names."""
    return unwrapped_name(name)


def float_tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def step_finite(loss: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool device tensor: the loss and the gradient norm are finite. No sync.

    The norm of all gradients is non-finite exactly when some element is (or it overflows,
    which is as bad), so one ``_foreach_norm`` covers every gradient.
    """
    ok = torch.isfinite(loss.detach()).all()
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        norms = torch._foreach_norm(grads)  # one multi-tensor kernel, no sync
        ok = ok & torch.isfinite(torch.stack(norms)).all()
    return ok


def nonfinite_kind(t: torch.Tensor) -> str:
    nan, inf = bool(torch.isnan(t).any()), bool(torch.isinf(t).any())  # sync: locate mode only
    return "nan+inf" if nan and inf else ("nan" if nan else "inf")


# --- op-level locate ----------------------------------------------------------------


class _Locator(TorchDispatchMode):
    """Checks every op's outputs; records the first non-finite one with its module."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.stack: list[str] = []
        self.node_module: dict[Any, str] = {}  # autograd node -> module whose forward made it
        self.param_module = {p: clean_name(n.rpartition(".")[0]) for n, p in model.named_parameters()}
        self.finding: NonfiniteOrigin | None = None
        self.handles = []
        for name, module in model.named_modules():
            name = clean_name(name)
            # prepend: the stack is pushed before user pre-hooks; appended post-hooks pop after
            # user forward hooks, so a hook's ops count as its module's.
            self.handles.append(module.register_forward_pre_hook(self._push(name), prepend=True))
            self.handles.append(module.register_forward_hook(self._pop, always_call=True))

    def _push(self, name: str) -> Callable:
        def hook(module: nn.Module, args: Any) -> None:
            self.stack.append(name)
        return hook

    def _pop(self, module: nn.Module, args: Any, output: Any) -> None:
        name = self.stack.pop()
        # Map the autograd nodes this module created (children mapped theirs first), stopping at
        # its inputs' nodes and the parameters' AccumulateGrad: backward ops are attributed by node.
        stop = {t.grad_fn for t in tree_leaves(args) if isinstance(t, torch.Tensor)}
        todo: list[torch.autograd.graph.Node | None] = [
            t.grad_fn for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node is None or node in stop or node in self.node_module or not hasattr(node, "next_functions"):
                continue
            if node.name().endswith("AccumulateGrad"):
                continue
            self.node_module[node] = name
            todo.extend(n for n, _ in node.next_functions)

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _module_now(self) -> tuple[str, str, str | None]:
        node = current_autograd_node()
        if node is None:
            return (self.stack[-1] if self.stack else OUTSIDE), "forward", None
        module = self.node_module.get(node)
        if module is None and hasattr(node, "variable"):  # AccumulateGrad: the parameter's module
            module = self.param_module.get(node.variable)
        return (OUTSIDE if module is None else module), "backward", node.name()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.finding is not None:
            return func(*args, **kwargs)
        ins = float_tensors((args, kwargs))
        inputs_finite = all(bool(torch.isfinite(t).all()) for t in ins)  # before in-place ops mutate them
        out = func(*args, **kwargs)
        outs = float_tensors(out)
        bad = [t for t in outs if not bool(torch.isfinite(t).all())]  # sync per op: locate mode only
        if bad:
            module, pass_, node = self._module_now()
            self.finding = NonfiniteOrigin(
                module=module, op=str(func), pass_=pass_, kind=nonfinite_kind(bad[0]), inputs_finite=inputs_finite,
                input_shapes=[list(t.shape) for t in ins], output_shapes=[list(t.shape) for t in outs],
                autograd_node=node)
        return out


def locate(model: nn.Module, fn: Callable[[], Any]) -> NonfiniteOrigin | None:
    """Run ``fn`` (forward + backward) checking every op; the first non-finite output, or None.

    Slow (one sync per op): run it on the step that went wrong, with the same inputs and RNG.

    Example::

        finding = locate(model, lambda: loss_fn(model, batch).backward())
    """
    locator = _Locator(model)
    try:
        with locator:
            fn()
    finally:
        locator.close()
    return locator.finding


def replay(model: nn.Module, fn: Callable[[], Any], rng: dict[str, Any]) -> NonfiniteOrigin | None:
    """``locate`` on a re-run of a step: same RNG state, gradients, buffers and RNG put back after."""
    params = list(model.parameters())
    grads = [p.grad for p in params]
    buffers = [b.detach().clone() for b in model.buffers()]  # e.g. BatchNorm running stats
    after = rng_state()
    set_rng_state(rng)
    for p in params:
        p.grad = None
    try:
        return locate(model, fn)
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers, strict=True):
                b.copy_(saved)
        set_rng_state(after)
