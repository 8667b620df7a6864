"""NaN/Inf sentinel: name the first module and op that produced a non-finite value.

Two levels, so that watching costs little and finding costs only when needed:

- **cheap** (every step): forward hooks put one ``output.sum()`` per module into a list of
  device scalars (a NaN or Inf anywhere makes the sum non-finite; one reduction pass is ~4x
  cheaper than ``isfinite(output).all()``), and one ``input.sum()`` where a module's input is
  not the previous module's output (it came from the parent's own code: a value born there is
  told apart from one born in the module); after backward, one ``_foreach_norm`` over the
  gradients. All is read with **one host-device sync per step** (``check``).
- **op-level** (only after a non-finite value was seen): the step is re-run with the same
  inputs and RNG state under a ``TorchDispatchMode`` that checks every op's output, forward
  and backward. Module names come from a stack kept by forward hooks; in backward, from the
  autograd node that runs (``torch._C._current_autograd_node``), mapped back to the module
  whose forward created it.

``torch.autograd.detect_anomaly(check_nan=True)`` checks every backward node, costs more on
every step, and names only the node; see ``benchmarks/nan_sentinel.py`` for the ratio.

Example::

    sentinel = NaNSentinel(model)
    for batch in loader:
        finding = sentinel.watch(lambda: loss_fn(model, batch).backward())
        if finding:
            finding.describe()      # module, op, pass, shapes
            break
        optimizer.step(); optimizer.zero_grad()
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from torchsmith.distributed.runtime import any_rank
from torchsmith.seeding import rng_state, set_rng_state
from torchsmith.transforms.base import Change

OUTSIDE = "(outside the model)"
"""Module name reported for an op that ran outside every module, e.g. in the loss function."""


class NonFiniteError(FloatingPointError):
    """A training step produced NaN or Inf (``Plan.nonfinite = "raise"``)."""


@dataclass(frozen=True, kw_only=True)
class Finding:
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
            before = f"after child {self.last_finite_child} (finite output)" if self.last_finite_child else "before any child"
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


# --- cheap checks -------------------------------------------------------------------


def clean_name(name: str) -> str:
    """A module's name as the user wrote it: without torch.compile's and checkpointing's wrapper names."""
    return ".".join(p for p in name.split(".") if p not in ("_orig_mod", "_checkpoint_wrapped_module"))


def _float_tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def step_finite(loss: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
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


def _kind(t: torch.Tensor) -> str:
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
        self.finding: Finding | None = None
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
        todo = [t.grad_fn for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
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
        node = torch._C._current_autograd_node()
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
        ins = _float_tensors((args, kwargs))
        inputs_finite = all(bool(torch.isfinite(t).all()) for t in ins)  # before in-place ops mutate them
        out = func(*args, **kwargs)
        outs = _float_tensors(out)
        bad = [t for t in outs if not bool(torch.isfinite(t).all())]  # sync per op: locate mode only
        if bad:
            module, pass_, node = self._module_now()
            self.finding = Finding(
                module=module, op=str(func), pass_=pass_, kind=_kind(bad[0]), inputs_finite=inputs_finite,
                input_shapes=[list(t.shape) for t in ins], output_shapes=[list(t.shape) for t in outs],
                autograd_node=node)
        return out


def locate(model: nn.Module, fn: Callable[[], Any]) -> Finding | None:
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


def replay(model: nn.Module, fn: Callable[[], Any], rng: dict[str, Any]) -> Finding | None:
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
        for p, g in zip(params, grads):
            p.grad = g
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers):
                b.copy_(saved)
        set_rng_state(after)


# --- the sentinel for your own loop ---------------------------------------------------


class NaNSentinel:
    """Cheap module-level checks every step; an op-level re-run when something is non-finite.

    ``watch(fn)`` runs ``fn`` (forward + backward of one step), reads the flags with one sync,
    and if anything was non-finite re-runs ``fn`` with the same RNG state under op-level
    checks. Call ``close()`` (or use ``with``) to remove the hooks.

    Example::

        with NaNSentinel(model) as sentinel:
            finding = sentinel.watch(lambda: loss_fn(model, batch).backward())
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.step = 0
        self._flags: list[torch.Tensor] = []
        self._order: list[tuple[str, int, int | None]] = []  # (module, its output's flag, its input's flag)
        self._outputs: dict[int, tuple[Any, int]] = {}  # id(output) -> (weakref, flag index), this step
        self._last_out: Any = None  # weakref to the last flagged output
        self._handles = [m.register_forward_hook(self._check_output(clean_name(n))) for n, m in model.named_modules()]

    def _check_output(self, name: str) -> Callable:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            outs = _float_tensors(output)
            # A container returning its child's output: already flagged. A weak reference, not an
            # id(): a freed output's id is reused by the next one (same address), which an id
            # comparison took for the same tensor.
            if not outs or (self._last_out is not None and self._last_out() is outs[0]):
                return
            self._last_out = weakref.ref(outs[0])
            inp = self._input_flag(_float_tensors(args))  # before the output's flag: it may add one
            self._order.append((name, len(self._flags), inp))
            # fp32 accumulation: a half-precision sum would overflow on finite values. No sync.
            self._flags.append(sum(t.detach().sum(dtype=torch.float32) for t in outs))
            self._outputs[id(outs[0])] = (weakref.ref(outs[0]), len(self._flags) - 1)
        return hook

    def _input_flag(self, ins: list[torch.Tensor]) -> int | None:
        """Index of the flag that says whether this module's first input was finite.

        In a chain (Sequential, a block calling its layers in turn) the input is the previous
        module's output: its flag serves, at no cost. Otherwise the input came from the
        parent's own code (or the batch): one more sum, so that a value born there is told apart.
        """
        if not ins:
            return None
        ref, index = self._outputs.get(id(ins[0]), (None, None))
        if ref is not None and ref() is ins[0]:
            return index
        self._flags.append(ins[0].detach().sum(dtype=torch.float32))
        return len(self._flags) - 1

    def check(self, loss: torch.Tensor | None = None) -> Finding | None:
        """Read this step's flags (one sync) and reset them; a module-level Finding, or None."""
        params = list(self.model.parameters())
        ok = step_finite(loss if loss is not None else torch.zeros(()), params)
        sums = torch.stack(self._flags) if self._flags else ok.new_zeros(0, dtype=torch.float32)
        values = torch.cat([torch.isfinite(sums), ok[None]]).tolist()  # the one sync
        order, self._order, self._flags, self._last_out, self._outputs = self._order, [], [], None, {}
        self.step += 1
        if all(values):
            return None
        for i, (name, out, inp) in enumerate(order):
            if not values[out]:
                if inp is not None and not values[inp]:
                    return _born_in_parent(order, values, i, self.step)
                return Finding(module=name, op=None, pass_="forward", kind="nan/inf",
                               inputs_finite=None if inp is None else True, step=self.step)
        bad = [n for n, p in self.model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        module = clean_name(bad[0].rpartition(".")[0]) if bad else OUTSIDE
        return Finding(module=module, op=None, pass_="backward" if bad else "forward", kind="nan/inf",
                       inputs_finite=None, step=self.step)

    def watch(self, fn: Callable[[], Any]) -> Finding | None:
        """Run one step's forward+backward ``fn``; on a non-finite value, the op-level Finding."""
        rng = rng_state()
        out = fn()
        found = self.check(out if isinstance(out, torch.Tensor) else None)
        if found is None:
            return None
        self._pause()
        try:
            exact = replay(self.model, fn, rng)
        finally:
            self._resume()
        if exact is None:  # not reproduced: keep the module-level answer, and say so
            return replace(found, reproduced=False)
        children = {k: getattr(found, k) for k in ("last_finite_child", "first_nonfinite_child")}
        return replace(exact, step=found.step, reproduced=True,
                       own_code=found.own_code and exact.module == found.module,
                       **(children if found.own_code and exact.module == found.module else {}))

    def _pause(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _resume(self) -> None:
        self._flags, self._order, self._last_out, self._outputs = [], [], None, {}
        self._handles = [m.register_forward_hook(self._check_output(clean_name(n))) for n, m in self.model.named_modules()]

    def close(self) -> None:
        self._pause()

    def __enter__(self) -> "NaNSentinel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _born_in_parent(order: list[tuple[str, int, int | None]], values: list[bool], i: int, step: int) -> Finding:
    """The first non-finite module output (``order[i]``) had non-finite inputs: the value was
    born before it, outside every module that reported. Walk up its ancestors to the first whose
    own inputs were finite (or not seen): the value was born in that module's own code."""
    name = order[i][0]
    entries = {n: (out, inp) for n, out, inp in order}
    child, parent = name, name.rpartition(".")[0]
    while parent:
        inp = entries.get(parent, (None, None))[1]
        if inp is None or values[inp]:
            break
        child, parent = parent, parent.rpartition(".")[0]
    prefix = f"{parent}." if parent else ""
    last = next((n for n, out, _ in reversed(order[:i]) if values[out] and n.startswith(prefix)
                 and "." not in n[len(prefix):]), None)
    inp = entries.get(parent, (None, None))[1] if parent else None
    return Finding(module=parent, op=None, pass_="forward", kind="nan/inf",
                   inputs_finite=None if inp is None else values[inp], step=step, own_code=True,
                   last_finite_child=last, first_nonfinite_child=child)


# --- engine integration: Plan.nonfinite ---------------------------------------------------


class NonFiniteGuard:
    """``Plan.nonfinite``: one finiteness check of loss and gradient norm per step (one sync).

    On a bad step it replays the step op by op to name the culprit, then raises, skips the
    optimizer step, or warns, as configured. ``findings`` keeps what was found.
    """

    def __init__(self, mode: str):
        self.mode = mode
        self.step = 0
        self.skipped = 0
        self.findings: list[Finding] = []
        self._rng: dict[str, Any] | None = None

    def start(self) -> None:
        """Snapshot the RNG before the step, so a bad step replays with the same dropout masks."""
        self.step += 1
        self._rng = rng_state()

    def step_ok(self, model: nn.Module, loss: torch.Tensor, replay_step: Callable[[], Any],
                check_grads: bool = True, params: list[torch.Tensor] | None = None) -> bool:
        """True: take the optimizer step. The ``bool()`` is this step's one host-device sync.

        ``params``: the tensors whose gradients the optimizer will apply (default: the model's).
        They differ when a transform keeps fp32 master copies (bf16 parameters)."""
        params = (list(model.parameters()) if params is None else params) if check_grads else []
        # Under torchrun every rank must act alike at the same step: any_rank all-reduces the
        # flag (MAX), so a NaN on one rank makes all ranks replay and skip or raise together.
        if not any_rank(~step_finite(loss, params)):
            return True
        try:
            found = replay(model, replay_step, self._rng) if self._rng is not None else None
        except Exception as err:  # e.g. a compiled region that refuses the checking mode: keep the verdict
            warnings.warn(f"nonfinite: the op-level re-run failed ({err!r}); no culprit named", RuntimeWarning)
            found = None
        found = Finding(**{**found.__dict__, "step": self.step}) if found else Finding(
            module=OUTSIDE, op=None, pass_="forward", kind="nan/inf", inputs_finite=None, step=self.step)
        self.findings.append(found)
        if self.mode == "raise":
            raise NonFiniteError(
                f"{found.describe()}.\nTip: look at that op's inputs; for an overflow lower the learning "
                "rate or clip gradients; set Plan.nonfinite='skip_step' to skip such steps instead.")
        warnings.warn(f"non-finite step: {found.describe()}"
                      + ("; optimizer step skipped" if self.mode == "skip_step" else ""), RuntimeWarning, stacklevel=3)
        if self.mode == "skip_step":
            self.skipped += 1
            return False
        return True


def apply_nonfinite(parts: Any, mode: str | None) -> Change:
    """Install ``Plan.nonfinite`` on the step parts (None: no check, the as-written step)."""
    change = Change("nonfinite", "no finiteness check, as written")
    if mode is None:
        return change
    before = parts.nonfinite
    parts.nonfinite = NonFiniteGuard(mode)
    change.summary = f"loss and gradient norm checked each step (one sync); non-finite -> {mode}"
    change.on_revert(lambda: setattr(parts, "nonfinite", before))
    return change
