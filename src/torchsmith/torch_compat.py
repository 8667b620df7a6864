"""Every private torch internal torchsmith relies on, in one place.

Public torch APIs cannot do these few things: read the compile-time counters, install a
compiled call on a module in place (so state_dict keys keep their names), ask which autograd
node is running, or walk the profiler's raw event tree. Each shim below wraps one internal
and has a test in ``tests/test_torch_compat.py``, so a torch upgrade that moves one breaks
one named test and is fixed in this file alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

__all__ = [
    "TorchDispatchMode", "compile_errors", "compile_seconds", "compiled_call", "current_autograd_node",
    "in_backward", "is_traceable_wrapper_subclass", "profiler_event_tree", "profiler_running",
    "set_compiled_call", "storage_key", "tree_leaves", "unwrapped_name",
]

WRAPPER_PREFIXES = ("_orig_mod", "_checkpoint_wrapped_module")
"""Path components that torch.compile and checkpoint_wrapper insert into module names."""


def storage_key(t: torch.Tensor) -> int:
    """An identity for the memory behind ``t``: views and aliases of one storage share it."""
    return t.untyped_storage()._cdata


def current_autograd_node() -> Any:
    """The autograd node running on this thread (None outside backward)."""
    return torch._C._current_autograd_node()


def in_backward() -> bool:
    """True inside backward on this thread (a graph task is running)."""
    return torch._C._current_graph_task_id() != -1


def profiler_running() -> bool:
    """True when a torch profiler (autograd or Kineto) is already recording: profilers do not nest."""
    return bool(torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled())


def profiler_event_tree(prof: Any) -> tuple[list[Any], Any]:
    """The roots of a finished profiler's raw event tree (allocations included), with the event-type
    enum to read their ``tag``: ``(roots, EventType)``. ``prof`` is a ``torch.profiler.profile``
    or the ``torch.autograd.profiler.profile`` inside it."""
    from torch._C._profiler import _EventType

    legacy = getattr(prof, "profiler", prof)
    return legacy.kineto_results.experimental_event_tree(), _EventType


def compile_seconds(keys: tuple[str, ...]) -> float:
    """Seconds Dynamo and Inductor spent in the named compile phases so far in this process."""
    from torch._dynamo.utils import compilation_time_metrics

    return sum(sum(compilation_time_metrics.get(key, ())) for key in keys)


def compile_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean compilation failed (Dynamo, the C++ toolchain, a lowering), not the user's code."""
    from torch._dynamo.exc import TorchDynamoException
    from torch._inductor.exc import CppCompileError, InvalidCxxCompiler, OperatorIssue

    return TorchDynamoException, CppCompileError, InvalidCxxCompiler, OperatorIssue


def compiled_call(module: nn.Module) -> Callable[..., Any] | None:
    """The compiled call ``module.compile()`` installed on ``module``, if any."""
    return module._compiled_call_impl


def set_compiled_call(module: nn.Module, fn: Callable[..., Any] | None) -> None:
    """Route ``module(...)`` through ``fn``, as ``module.compile()`` does (None: back to eager).

    Unlike ``torch.compile(module)`` this keeps the module object, so its state_dict keys and
    the references others hold to it stay the same.
    """
    if fn is None:
        module.__dict__.pop("_compiled_call_impl", None)  # the class default (None) shows again
    else:
        module._compiled_call_impl = fn


def unwrapped_name(name: str) -> str:
    """A module path without the wrapper components compile and checkpointing insert."""
    return ".".join(p for p in name.split(".") if p not in WRAPPER_PREFIXES)
