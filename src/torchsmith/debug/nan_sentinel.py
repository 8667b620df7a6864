"""NaN/Inf sentinel: name the first module and op that produced a non-finite value.

Two levels, so that watching costs little and finding costs only when needed:

- **cheap** (every step): forward hooks put one ``output.sum()`` per module into a list of
  device scalars (a NaN or Inf anywhere makes the sum non-finite; one reduction pass, where
  ``isfinite(output).all()`` makes two; ``benchmarks/nan_sentinel.py`` times the sentinel), and
  one ``input.sum()`` where a module's input is not the previous module's output (it came from
  the parent's own code: a value born there is told apart from one born in the module); after
  backward, one ``_foreach_norm`` over the gradients. All is read with **one host-device sync per step** (``check``).
- **op-level** (only after a non-finite value was seen): the step is re-run with the same
  inputs and RNG state, checking every op's output (``measure.locate_nonfinite``, which
  ``Plan.nonfinite`` uses too).

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

import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from torchsmith.engine.nonfinite import NonFiniteError  # noqa: F401  (raised by NaNSentinel users' code paths)
from torchsmith.measure.locate_nonfinite import (  # noqa: F401  (NonfiniteOrigin, locate, step_finite: public here too)
    OUTSIDE,
    NonfiniteOrigin,
    clean_name,
    float_tensors,
    locate,
    replay,
    step_finite,
)
from torchsmith.seeding import rng_state


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
            outs = float_tensors(output)
            # A container returning its child's output: already flagged. A weak reference, not an
            # id(): a freed output's id is reused by the next one (same address), which an id
            # comparison took for the same tensor.
            if not outs or (self._last_out is not None and self._last_out() is outs[0]):
                return
            self._last_out = weakref.ref(outs[0])
            inp = self._input_flag(float_tensors(args))  # before the output's flag: it may add one
            self._order.append((name, len(self._flags), inp))
            # fp32 accumulation: a half-precision sum would overflow on finite values. No sync.
            flag = sum(t.detach().sum(dtype=torch.float32) for t in outs)
            assert isinstance(flag, torch.Tensor)  # outs is not empty (returned above)
            self._flags.append(flag)
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

    def check(self, loss: torch.Tensor | None = None) -> NonfiniteOrigin | None:
        """Read this step's flags (one sync) and reset them; a module-level NonfiniteOrigin, or None."""
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
                return NonfiniteOrigin(module=name, op=None, pass_="forward", kind="nan/inf",
                               inputs_finite=None if inp is None else True, step=self.step)
        bad = [n for n, p in self.model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        module = clean_name(bad[0].rpartition(".")[0]) if bad else OUTSIDE
        return NonfiniteOrigin(module=module, op=None, pass_="backward" if bad else "forward", kind="nan/inf",
                       inputs_finite=None, step=self.step)

    def watch(self, fn: Callable[[], Any]) -> NonfiniteOrigin | None:
        """Run one step's forward+backward ``fn``; on a non-finite value, the op-level NonfiniteOrigin."""
        rng = rng_state()
        out = fn()
        found = self.check(out if isinstance(out, torch.Tensor) else None)
        return None if found is None else self.refine(found, fn, rng)

    def refine(self, found: NonfiniteOrigin, fn: Callable[[], Any], rng: dict[str, Any]) -> NonfiniteOrigin:
        """The op-level NonfiniteOrigin for a step :meth:`check` flagged: ``fn`` (that step's forward +
        backward) replayed from ``rng``, the RNG state the step started with. Gradients, buffers
        and RNG are put back after; when the replay stays finite, ``found`` with reproduced=False."""
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
        self._handles = [m.register_forward_hook(self._check_output(clean_name(n)))
                         for n, m in self.model.named_modules()]

    def close(self) -> None:
        self._pause()

    def __enter__(self) -> NaNSentinel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _born_in_parent(order: list[tuple[str, int, int | None]], values: list[bool], i: int, step: int) -> NonfiniteOrigin:
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
    return NonfiniteOrigin(module=parent, op=None, pass_="forward", kind="nan/inf",
                   inputs_finite=None if inp is None else values[inp], step=step, own_code=True,
                   last_finite_child=last, first_nonfinite_child=child)
