"""The knobs :mod:`torchsmith.inject.plan_injection` puts into an unmodified script.

Each function records in ``applied`` (knob -> :class:`~torchsmith.inject.outcome.KnobOutcome` as
JSON) what it did, or why it left the knob as written, so the tuner can report it. Nothing here
overrides a value the script chose: a constructor argument the script passed (other than PyTorch's own default) is kept.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn

from torchsmith.inject.outcome import OutcomeStatus, record
from torchsmith.text import first_line
from torchsmith.torch_compat import compiled_call


def patch_optimizers(impl: str, applied: dict[str, dict[str, str]]) -> None:
    """Make ``fused=True`` / ``foreach=True|False`` the constructor default of every torch.optim
    optimizer that takes it, where the script left both unset."""
    if impl == "as_written":
        return
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or cls is torch.optim.Optimizer:
            continue
        params = inspect.signature(cls.__init__).parameters
        key = "fused" if impl == "fused" else "foreach"
        if key in params and "_torchsmith_orig" not in cls.__init__.__dict__:
            cls.__init__ = _optimizer_init(cls, cls.__init__, impl, key, applied)  # type: ignore[method-assign]  # the injection's purpose


def _optimizer_init(cls: type, orig: Any, impl: str, key: str, applied: dict[str, dict[str, str]]) -> Any:
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the class's __init__
        bound = sig.bind_partial(self, params, *args, **kwargs).arguments
        if type(self) is not cls or bound.get("fused") is not None or bound.get("foreach") is not None:
            record(applied, "optimizer", "as_written", f"the script chose the {cls.__name__} implementation",
                   keep=True)
            return orig(self, params, *args, **kwargs)
        params = list(params) if not isinstance(params, (list, tuple)) else params  # a generator is read once
        value = {"fused": True, "foreach": True, "for_loop": False}[impl]
        try:
            orig(self, params, *args, **{**kwargs, key: value})
            record(applied, "optimizer", "applied", f"{cls.__name__}(..., {key}={value})")
        except (RuntimeError, ValueError) as err:  # e.g. fused on a device or dtype it does not support
            record(applied, "optimizer", "refused", f"{cls.__name__}({key}={value}): {first_line(err)}")
            orig(self, params, *args, **kwargs)

    __init__._torchsmith_orig = orig  # type: ignore[attr-defined]
    return __init__


_LOADER_DEFAULTS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None}


def patch_dataloader(cfg: Any, applied: dict[str, dict[str, str]], seen: list[dict[str, Any]]) -> None:
    """Fill in the loader knobs the script left at PyTorch's default.

    A value equal to the default counts as left: the HF Trainer and Lightning pass
    ``num_workers=0`` explicitly from their own defaults."""
    from torch.utils.data import DataLoader

    wanted = {k: getattr(cfg, k) for k in _LOADER_DEFAULTS if getattr(cfg, k) is not None}
    orig = DataLoader.__init__
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the class's __init__
        bound = sig.bind_partial(self, *args, **kwargs).arguments
        set_here = {}
        for k, v in wanted.items():
            if bound.get(k, _LOADER_DEFAULTS[k]) == _LOADER_DEFAULTS[k]:
                set_here[k] = v
        workers = set_here.get("num_workers", bound.get("num_workers", 0))
        if not workers:  # these two are refused by DataLoader without workers
            set_here.pop("persistent_workers", None)
            set_here.pop("prefetch_factor", None)
        if not torch.cuda.is_available():
            set_here.pop("pin_memory", None)  # nothing to pin for on a CPU
        call = {n: x for n, x in bound.items() if n != "self"}  # by name: positional ones too
        orig(self, **{**call, **set_here})
        seen.append({"num_workers": self.num_workers, "pin_memory": bool(self.pin_memory),
                     "persistent_workers": bool(self.persistent_workers), "prefetch_factor": self.prefetch_factor})
        if wanted and set_here:
            record(applied, "loader", "applied", ", ".join(f"{k}={v}" for k, v in set_here.items()))
        elif wanted:  # e.g. accelerate re-creating the loader from the first one's values keeps "applied"
            record(applied, "loader", "as_written", "the script set every loader argument", keep=True)

    DataLoader.__init__ = __init__  # type: ignore[method-assign]  # also with no loader knob: the report lists the loaders seen


def apply_model_knobs(model: nn.Module, plan: Any, applied: dict[str, dict[str, str]]) -> None:
    """Checkpointing, autocast and compile on the trained model, in that order (compile traces
    the checkpointed, autocast forward as one)."""
    from torchsmith.plan import FP32, Autocast, NoCheckpointing

    if not isinstance(plan.checkpointing, NoCheckpointing):
        record(applied, "checkpointing", *_checkpoint_blocks(model, plan.checkpointing))
    if isinstance(plan.precision, Autocast):
        # The wrapper goes on either way (it does nothing inside the script's own autocast); what
        # the first step saw of the script's autocast is what the outcome reports.
        record(applied, "precision", *_autocast_forward(model, plan.precision.dtype), keep=True)
    elif not isinstance(plan.precision, FP32):
        record(applied, "precision", "not_applied", f"{plan.precision.kind} needs the model built by torchsmith")
    if plan.compile.enabled:
        record(applied, "compile", *_compile(model, plan.compile))


def _autocast_forward(model: nn.Module, dtype_name: str) -> tuple[OutcomeStatus, str]:
    dtype = getattr(torch, dtype_name)
    param = next(model.parameters())
    device = param.device.type
    if dtype == torch.float16:
        return "not_applied", "fp16 needs a GradScaler around the script's backward; use bfloat16"
    forward = model.forward
    wrap = _autocast_wrapper(forward, device, dtype, param.dtype)
    model.forward = wrap
    if hasattr(model, "training_step") and callable(model.training_step):
        # Lightning: training_step may call submodules directly rather than self(...).
        model.training_step = _autocast_wrapper(model.training_step, device, dtype, param.dtype)
    return "applied", f"torch.autocast({device!r}, dtype=torch.{dtype_name}) around {type(model).__name__}.forward"


def _autocast_wrapper(fn: Any, device: str, dtype: torch.dtype, out_dtype: torch.dtype) -> Any:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.is_autocast_enabled(device):
            return fn(*args, **kwargs)  # already inside one (the script's, or training_step's)
        with torch.autocast(device, dtype=dtype):
            out = fn(*args, **kwargs)
        # The script computes its loss from these outside the autocast region: give it the
        # dtype it was written for, as autocast itself does for cross_entropy.
        return _upcast(out, out_dtype)

    run._torchsmith_autocast = True  # type: ignore[attr-defined]
    return run


def _upcast(out: Any, dtype: torch.dtype) -> Any:
    if isinstance(out, torch.Tensor):
        return out.to(dtype) if out.is_floating_point() and out.dtype != dtype else out
    if isinstance(out, dict):  # also HF ModelOutput, updated in place to keep its type
        for k in list(out.keys()):
            out[k] = _upcast(out[k], dtype)
        return out
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return type(out)(_upcast(o, dtype) for o in out)
    if isinstance(out, list):
        return [_upcast(o, dtype) for o in out]
    return out


def _compile(model: nn.Module, cfg: Any) -> tuple[OutcomeStatus, str]:
    if compiled_call(model) is not None or type(model).__name__ == "OptimizedModule":
        return "as_written", "the model is compiled already"
    model.compile(mode=None if cfg.mode == "default" else cfg.mode)
    return "applied", f"{type(model).__name__}.compile()"


def _checkpoint_blocks(model: nn.Module, cfg: Any) -> tuple[OutcomeStatus, str]:
    """Checkpoint the blocks ``torchsmith.structure`` discovers (``transformer.h``, ``model.layers``, ...)."""
    from torchsmith.structure import StructureError
    from torchsmith.transforms.activation_checkpoint import apply_checkpointing
    from torchsmith.transforms.base import TransformError

    try:
        change = apply_checkpointing(model, cfg)
    except (TransformError, StructureError) as err:
        return "not_applied", first_line(err)
    return "applied", f"{change.summary} ({', '.join(change.targets)})"
