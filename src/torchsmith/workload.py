"""What to train: a model factory, batches, a loss and an optimizer factory.

A :class:`Workload` is the one description every command works from. It holds
factories, not objects, so that ``tune`` can build a fresh model for each
candidate plan from the same seed.

Example::

    import torch, torchsmith

    def workload() -> torchsmith.Workload:
        xs = torch.randn(512, 16)
        ys = xs.sum(1, keepdim=True)
        batches = [(xs[i:i + 64], ys[i:i + 64]) for i in range(0, 512, 64)]
        return torchsmith.Workload(
            model=lambda: torch.nn.Linear(16, 1),
            batches=batches,
            loss=lambda model, b: torch.nn.functional.mse_loss(model(b[0]), b[1]),
            optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
            samples_per_batch=64,
        )

then ``torchsmith tune mymodule:workload``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

Batch = Any
"""Whatever the batch source yields: a tensor, a tuple or dict of tensors."""

BUILTIN_WORKLOADS: dict[str, str] = {
    "gpt-mini": "torchsmith.workloads.gpt_mini:workload",
    "cnn-mini": "torchsmith.workloads.cnn_mini:workload",
    "mlp": "torchsmith.workloads.mlp:workload",
    # Hugging Face models from tiny configs; need the optional extra torchsmith[hf].
    "hf-gpt2": "torchsmith.workloads.hf:gpt2",
    "hf-llama": "torchsmith.workloads.hf:llama",
    "hf-vit": "torchsmith.workloads.hf:vit",
    "hf-resnet": "torchsmith.workloads.hf:resnet",
}
DEFAULT_WORKLOAD = "gpt-mini"


class WorkloadError(ValueError):
    """A workload spec that does not resolve, or a workload that is malformed."""


@dataclass(kw_only=True)
class Workload:
    """A training job described by factories.

    ``batches`` is re-iterable (a list, a DataLoader, or an object with
    ``__iter__``) or a zero-argument callable returning a fresh iterable. One
    pass over it is one epoch. If the source has ``set_epoch(int)`` the engine
    calls it before each epoch, as with ``DistributedSampler``. Iteration must be
    deterministic given the seed, so that a resumed run sees the same batches.
    """

    model: Callable[[], nn.Module]
    """Builds a fresh model on the CPU. Called once per run or candidate, after seeding."""
    batches: Iterable[Batch] | Callable[[], Iterable[Batch]]
    """Training batches; one pass is one epoch."""
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    """``loss(model, batch) -> scalar tensor``; runs the forward pass."""
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    """``optimizer(params) -> Optimizer``."""
    scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    """Optional ``scheduler(optimizer) -> LRScheduler``, stepped once per optimizer step."""
    eval_batches: Iterable[Batch] | Callable[[], Iterable[Batch]] | None = None
    """Optional validation batches for ``val_loss``."""
    samples_per_batch: int | None = None
    """Samples in one batch; enables samples/s."""
    tokens_per_batch: int | None = None
    """Tokens in one batch; enables tokens/s (preferred over samples when set)."""
    name: str = "workload"
    seed: int = 0
    extras: dict[str, Any] = field(default_factory=dict)
    """Free-form facts about the workload (e.g. the loader as written) for reports."""
    loader: Callable[[Any], Iterable[Batch]] | None = None
    """Optional ``loader(cfg: plan.LoaderConfig) -> Iterable``: rebuilds the training batches with
    the plan's DataLoader arguments (None fields = as written), so ``plan.loader`` takes effect.
    ``torchsmith.data.loader.make_loader`` builds one; ``batches`` stays the as-written source."""
    blocks: str | None = None
    """Dotted path of the repeated blocks' container (``"model.layers"``), for per-block transforms
    (checkpointing, regional compile, FSDP2 units) when discovery is ambiguous; None = discovered."""
    head: str | None = None
    """Dotted path of the output head (``"lm_head"``) for the chunked loss; None = discovered."""
    spec: str | None = None
    """The spec :func:`load_workload` resolved it from (``"mlp"``, ``"train.py:workload"``): a fresh
    process rebuilds the workload from it (``harness.fresh_round``). None: built in Python."""

    def __post_init__(self) -> None:
        if self.blocks is not None or self.head is not None:
            self.model = _Hinted(self.model, self.blocks, self.head)

    def iter_batches(self) -> Iterable[Batch]:
        """One epoch's batches."""
        return self.batches() if callable(self.batches) else self.batches

    def iter_eval_batches(self) -> Iterable[Batch]:
        if self.eval_batches is None:
            return []
        return self.eval_batches() if callable(self.eval_batches) else self.eval_batches

    def cycle(self, source: Iterable[Batch] | None = None) -> Iterator[Batch]:
        """Batches forever, epoch after epoch, from ``source`` (default: the batches as written),
        calling ``set_epoch(epoch)`` first when the source has it. An epoch without a single batch
        raises :class:`WorkloadError` instead of looping forever.

        >>> w = Workload(model=None, batches=[1, 2], loss=None, optimizer=None)
        >>> from itertools import islice; list(islice(w.cycle(), 5))
        [1, 2, 1, 2, 1]
        """
        epoch = 0
        while True:
            src = source if source is not None else self.iter_batches()
            if hasattr(src, "set_epoch"):
                src.set_epoch(epoch)
            empty = True
            for batch in src:
                empty = False
                yield batch
            if empty:
                raise WorkloadError(
                    f"workload {self.name!r}: epoch {epoch} yielded no batches.\n"
                    "Tip: check that `batches` (or the loader it builds) is not empty and can be iterated "
                    "more than once (a generator is exhausted after one pass; pass a list or a function).")
            epoch += 1

    @property
    def throughput_unit(self) -> tuple[str, int | None]:
        """``("tokens", n)``, ``("samples", n)`` or ``("batches", None)``."""
        if self.tokens_per_batch:
            return "tokens", self.tokens_per_batch
        if self.samples_per_batch:
            return "samples", self.samples_per_batch
        return "batches", None


_HINT_ATTR = "_torchsmith_structure"  # torchsmith.structure.HINT_ATTR (which sits above this layer)


class _Hinted:
    """The model factory, tagging each model it builds with the workload's ``blocks``/``head`` paths,
    so that every command that builds the model (run, tune, inspect) finds the same parts."""

    def __init__(self, factory: Callable[[], nn.Module], blocks: str | None, head: str | None) -> None:
        self.factory, self.blocks, self.head = factory, blocks, head

    def __call__(self) -> nn.Module:
        model = self.factory()
        model.__dict__[_HINT_ATTR] = (self.blocks, self.head)
        return model


def load_workload(spec: str | Workload | None = None) -> Workload:
    """Resolve a workload from a built-in name, ``pkg.mod:fn`` or ``path/to/file.py:fn``.

    >>> load_workload("mlp").name
    'mlp'
    """
    if isinstance(spec, Workload):
        return spec
    spec = spec or DEFAULT_WORKLOAD
    target = BUILTIN_WORKLOADS.get(spec, spec)
    if ":" not in target:
        raise WorkloadError(
            f"workload spec {spec!r} is neither a built-in name ({', '.join(BUILTIN_WORKLOADS)}) "
            "nor of the form 'package.module:function' or 'path/to/file.py:function'.\n"
            f"Tip: torchsmith tune {spec}:workload  (if {spec!r} defines `def workload()`)"
        )
    factory = import_attr(target, f"workload spec {spec!r}")
    attr = target.rpartition(":")[2]
    try:
        workload = factory() if callable(factory) and not isinstance(factory, Workload) else factory
    except WorkloadError:  # the factory's own diagnosis (a missing extra, say): already one clear message
        raise
    except Exception as err:  # the user's factory failed: one line naming it and where, not a traceback
        raise WorkloadError(f"workload spec {spec!r}: {attr}() raised {type(err).__name__}: {_first(err)}"
                            f"{_where(err)}.\nTip: run the factory on its own (python -c 'import ...; "
                            f"{attr}()') to see the full traceback.") from err
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload spec {spec!r}: {attr}() returned {type(workload).__name__}, expected torchsmith.Workload.\n"
            "Tip: return torchsmith.Workload(model=..., batches=..., loss=..., optimizer=...)"
        )
    if workload.name == "workload":
        workload.name = spec
    if workload.spec is None:
        workload.spec = spec
    return workload


def check_scalar_loss(loss: Any, where: str = "loss(model, batch)") -> None:
    """Raise :class:`WorkloadError` unless ``loss`` is a one-element tensor (backward needs a scalar)."""
    if not isinstance(loss, torch.Tensor):
        raise WorkloadError(f"the workload's {where} returned {type(loss).__name__}; expected a scalar tensor.\n"
                            "Tip: return the loss tensor itself, e.g. F.cross_entropy(model(x), y).")
    if loss.numel() != 1:
        raise WorkloadError(f"the workload's {where} returned a tensor of shape {tuple(loss.shape)}; "
                            "expected a scalar (shape ()).\nTip: reduce it, e.g. `.mean()` over the batch.")


def _first(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _where(err: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def import_attr(target: str, what: str) -> Any:
    """The object named by ``package.module:name`` or ``path/to/file.py:name`` (dots allowed in name).

    ``what`` opens every error message, e.g. ``"workload spec 'x'"``.

    >>> import_attr("torchsmith.workload:Workload", "example").__name__
    'Workload'
    """
    if ":" not in target:
        raise WorkloadError(f"{what}: {target!r} is not of the form 'package.module:name' or "
                            "'path/to/file.py:name'.\nTip: e.g. mypkg.ops:MyFunction")
    module_part, _, attr = target.rpartition(":")
    obj = _import_module(what, module_part)
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n))]
            raise WorkloadError(f"{what}: {module_part!r} has no attribute {attr!r}. "
                                f"Callables it defines: {', '.join(public[:12]) or 'none'}.")
        obj = getattr(obj, part)
    return obj


def _import_module(what: str, module_part: str):
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part).expanduser()
        if not path.is_file():
            raise WorkloadError(f"{what}: file {str(path)!r} does not exist (cwd: {Path.cwd()}).")
        name = f"_torchsmith_user_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise WorkloadError(f"{what}: cannot import {str(path)!r} as a Python module (expected a .py file).")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        # The user's file may import siblings, as it would under `python file.py`.
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            module_spec.loader.exec_module(module)
        except SyntaxError as err:
            raise WorkloadError(f"{what}: {err.filename}:{err.lineno}: syntax error: {err.msg}.\n"
                                f"Tip: fix that line; `python -m py_compile {path}` checks the file.") from None
        except Exception as err:
            raise WorkloadError(f"{what}: importing {str(path)!r} raised {type(err).__name__}: {_first(err)}"
                                f"{_where(err)}.\nTip: `python {path}` shows the full traceback.") from err
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        # `torchsmith tune mymod:workload` should find mymod.py in the current directory, as
        # `python -m` would; the console script does not put the cwd on sys.path by itself.
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as err:
        if err.name and module_part.startswith(err.name):
            raise WorkloadError(
                f"{what}: no module named {module_part!r} on sys.path "
                f"(tried the built-ins {', '.join(BUILTIN_WORKLOADS)} and an import of {module_part!r}).\n"
                "Tip: run from the directory that holds the module, or pass a file path: path/to/file.py:workload"
            ) from None
        raise
