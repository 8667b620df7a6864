"""torch.compile of the whole model or of each repeated block (regional compilation).

Compilation is lazy: Dynamo traces and Inductor compiles the forward at the first call,
and the backward at the first backward. Either can fail (an unsupported construct, no
C++ compiler, a backend bug). Then the model falls back to eager with a warning naming
the reason, and the step that hit the failure runs again eagerly:

* a failure in forward is caught around the compiled module call, which re-runs eagerly;
* a failure in backward is caught by the training step (``StepParts.recover``), which
  clears the gradients and re-runs the batch.

Compile time is reported apart from step time: :func:`compile_seconds` reads the time
Dynamo itself records for tracing and compiling, forward and backward.

Example::

    change = apply_compile(model, Compile(enabled=True, regional=True))
    loss_fn(model, batch).backward()      # compiles here, once per distinct block code
    change.revert()                       # eager again
"""

from __future__ import annotations

import functools
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchsmith import torch_compat
from torchsmith.plan import Compile
from torchsmith.structure import StructureError, discover
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo, mark_applied

# Keys under which Dynamo records compile time: the forward's whole compile (tracing, AOT
# autograd, Inductor), and the lazily compiled backward.
COMPILE_SETUP_SECONDS = 25.0
"""Budget tune sets aside per compile candidate before its first measurement: above gpt-mini's
whole-model compile with empty Inductor caches on 2 CPU cores, which ``benchmarks/compile_time.py``
measures (cold and warm, whole and block by block)."""

_COMPILE_TIME_KEYS = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")


def is_compile_error(err: BaseException) -> bool:
    """True for a failure to compile: a Dynamo/Inductor error, or any error raised while AOT autograd
    compiled the backward lazily (a backend's own exception passes through unwrapped there)."""
    if isinstance(err, torch_compat.compile_errors()):
        return True
    frames = traceback.extract_tb(err.__traceback__)
    return any(f.name == "get_or_compile" and "_aot_autograd" in f.filename for f in frames)


def compile_seconds() -> float:
    """Seconds this process has spent compiling with torch.compile so far (forward and backward).

    Take the difference around a region:

    >>> before = compile_seconds()  # doctest: +SKIP
    >>> step(batch)                 # doctest: +SKIP
    >>> compile_seconds() - before  # doctest: +SKIP
    4.2
    """
    return torch_compat.compile_seconds(_COMPILE_TIME_KEYS)


class EagerFallback:
    """Reverts every compiled module of one ``apply_compile`` to eager on a compile error, once."""

    def __init__(self) -> None:
        self.modules: list[nn.Module] = []
        self.reason: str | None = None
        """Why compilation was abandoned; None while compiled."""

    def __call__(self, err: BaseException) -> bool:
        """Fall back if ``err`` is a compile error of a still-compiled model; True when the caller should re-run."""
        if self.reason is not None or not self.modules or not is_compile_error(err):
            return False
        self.reason = _describe(err)
        cause = getattr(err, "inner_exception", None) or err.__cause__  # BackendCompilerFailed wraps the real error
        if cause is not None:
            self.reason += f" <- {_describe(cause)}"
        for module in self.modules:
            _uncompile(module)
        warnings.warn(
            f"torch.compile failed, so torchsmith runs this model eagerly ({self.reason}). The step that "
            "hit the failure is re-run eagerly.\nTip: set compile.enabled=false in the plan to skip the "
            "attempt, or see TORCH_LOGS=graph_breaks,recompiles for the cause.",
            RuntimeWarning, stacklevel=2,
        )
        return True


def _describe(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200]}" if lines else type(err).__name__


def _uncompile(module: nn.Module) -> None:
    torch_compat.set_compiled_call(module, None)


def _guarded(module: nn.Module, compiled: Callable[..., Any], fallback: EagerFallback) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled(*args, **kwargs)
        except Exception as err:
            if not fallback(err):
                raise
        # Outside the except block, so the failed attempt's frames are released first.
        return module._call_impl(*args, **kwargs)

    return call


def apply_compile(model: nn.Module, cfg: Compile, *, recover: list[Callable[[BaseException], bool]] | None = None,
                  backend: str | Callable[..., Any] = "inductor") -> Change:
    """Compile in place with ``torch.compile`` of each target's ``_call_impl``, so state_dict keys stay unchanged.

    ``recover`` is the training step's list of error handlers (``StepParts.recover``): the
    fallback joins it so that a failure in the lazily compiled backward also reverts to eager.
    ``backend`` is for tests and experiments; plans always use Inductor.

    >>> change = apply_compile(model, Compile(enabled=True, regional=True))  # doctest: +SKIP
    """
    change = Change("compile", "eager, as written")
    if not cfg.enabled:
        return change
    if cfg.regional:
        try:
            targets = discover(model).block_items("regional compile")
        except StructureError as err:
            raise TransformError(
                f"{err}\nOr use Compile(enabled=True, regional=False) to compile the whole model."
            ) from None
    else:
        targets = [("", model)]
    mark_applied(model, "compile", change)
    fallback = EagerFallback()
    for name, module in targets:
        if torch_compat.compiled_call(module) is not None:
            change.revert()
            raise TransformError(
                f"{name or type(model).__name__} is already compiled (by module.compile() outside torchsmith); "
                "compiling it again would nest two compiled wrappers.\n"
                "Tip: drop your own .compile() call and let the plan compile, or leave compile.enabled false."
            )
        compiled = torch.compile(module._call_impl, mode=cfg.mode, backend=backend)
        torch_compat.set_compiled_call(module, _guarded(module, compiled, fallback))
        fallback.modules.append(module)
        change.on_revert(functools.partial(_uncompile, module))
        change.targets.append(name or type(model).__name__)
    if recover is not None:
        recover.append(fallback)
        change.on_revert(lambda: recover.remove(fallback) if fallback in recover else None)
    change.fallback = fallback  # type: ignore[attr-defined]
    change.summary = (f"torch.compile(mode={cfg.mode!r}) of "
                      + (f"{len(targets)} blocks" if cfg.regional else "the whole model"))
    return change


def _candidates(device: DeviceInfo) -> list[Compile]:
    out = [Compile(enabled=True), Compile(enabled=True, regional=True)]
    if device.type == "cuda":  # on CPU, max-autotune's kernel benchmarking takes minutes for little gain
        out.append(Compile(enabled=True, mode="max-autotune"))
    return out


INFO = TransformInfo(
    name="compile",
    plan_field="compile",
    summary="torch.compile the whole model or each repeated block; eager fallback on failure.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 1 if device.native_bf16 or device.type == "cuda" else 7,
    setup_seconds=COMPILE_SETUP_SECONDS,
)
