"""The script side of ``torchsmith tune -- python train.py``, ``verify`` and ``run --plan plan.json -- ...``:
apply a plan's knobs to an unmodified script, and (when tuning) measure a window of its steps.

``sitecustomize`` calls :func:`install_from_env` when ``TORCHSMITH_PLAN`` holds a spec (JSON,
see :class:`InjectSpec`). Process-wide knobs (threads, matmul precision, cudnn.benchmark) are set
at once; the optimizer and DataLoader knobs become constructor defaults, used only where the
script left that argument at PyTorch's default; model knobs (autocast, compile, checkpointing)
go on the trained model at the end of the optimizer's first step. The trained model is the
outermost module called in that first step whose parameters the optimizer holds, so step 1 always runs
as written (it is warm-up in every measurement).

When tuning, the process also seeds torch/numpy/random, records the loss of every step (the
scalars passed to ``backward``, summed per optimizer step) and the step end times, lists the
files it opens for writing (an audit hook), writes ``result.json`` and exits cleanly
(``SystemExit(0)``) once it has ``warmup + window`` steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchsmith.inject import gloo_exit
from torchsmith.inject.env import PLAN_ENV_KEY
from torchsmith.inject.outcome import record


@dataclass(frozen=True, kw_only=True)
class InjectSpec:
    """What the parent asks of each process of the script (travels as JSON in ``TORCHSMITH_PLAN``)."""

    plan: dict[str, Any]
    """``Plan.to_dict()`` of the plan to apply."""
    out_dir: str | None = None
    """Tuning: where ``result.json`` goes (the first process to step claims it). None: just apply."""
    warmup: int = 3
    """Steps run before the measured window (step 1 runs as written, compile happens in step 2)."""
    window: int = 10
    """Measured optimizer steps; the process exits after ``warmup + window`` steps when tuning."""
    seed: int | None = None
    """Seed for torch, numpy and random at start-up; the same for every candidate."""


@dataclass
class ScriptFacts:
    """What one tuned run of the script measured and saw; crosses to the parent as JSON."""

    steps: int = 0
    step_ends: list[float] = field(default_factory=list)
    """perf_counter() at the end of each optimizer step (after a CUDA sync when CUDA is in use)."""
    optimizer_step_seconds: list[float] = field(default_factory=list)
    """Wall time inside each ``optimizer.step`` on CPU (empty on CUDA, whose kernels run after the call
    returns): the most an optimizer knob can save (``tuner/script/order.py``)."""
    losses: list[float] = field(default_factory=list)
    applied: dict[str, dict[str, str]] = field(default_factory=dict)
    """knob -> :class:`~torchsmith.inject.outcome.KnobOutcome` as JSON: its status and detail."""
    rank: int | None = None
    """``RANK`` of the measured process under torchrun (always 0: only rank 0 claims), else None."""
    model: str = ""
    device: str = "cpu"
    optimizer: dict[str, Any] = field(default_factory=dict)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    ddp: list[dict[str, Any]] = field(default_factory=list)
    """Each DistributedDataParallel the script built, as it runs (:func:`torchsmith.inject.ddp.ddp_facts`)."""
    written_files: list[str] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    window_done: bool = False


class PlanInjection:
    """Installs the plan's knobs into this process; see the module docstring."""

    def __init__(self, spec: InjectSpec):
        from torchsmith.plan import Plan

        self.spec = spec
        self.plan = Plan.from_dict(spec.plan)
        self.tuning = spec.out_dir is not None
        self.facts = ScriptFacts()
        self._written: set[str] = set()
        self._loss = 0.0
        self._in_backward = False
        self._optimizer: weakref.ref | None = None
        self._called: list[weakref.ref] = []  # outermost modules called before the first step
        self._depth = 0
        self._forward_hooks: list[Any] = []
        self._claimed: bool | None = None
        self._step_started: float | None = None

    # -- start-up --------------------------------------------------------------------------

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        if self.tuning:
            sys.addaudithook(self._audit)  # first, so files opened during start-up are listed too
            self._seed(self.spec.seed)
        self._process_knobs(torch)
        from torchsmith.inject import knobs

        knobs.patch_optimizers(self.plan.optimizer.impl, self.facts.applied)
        knobs.patch_dataloader(self.plan.loader, self.facts.applied, self.facts.loaders)
        self._parallel_knobs(torch)
        register_optimizer_step_pre_hook(self._pre_step)
        register_optimizer_step_post_hook(self._post_step)
        if self._needs_model() or self.tuning:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            # Only until the first step: global module hooks cost time on every module call.
            self._forward_hooks = [
                register_module_forward_pre_hook(self._forward_pre),
                register_module_forward_hook(self._forward_post, always_call=True),
            ]
        if self.tuning:
            self._patch_backward(torch)

    def _seed(self, seed: int | None) -> None:
        if seed is None:
            return
        import random

        import torch

        random.seed(seed)
        torch.manual_seed(seed)
        try:
            import numpy

            numpy.random.seed(seed)
        except ImportError:
            pass

    def _process_knobs(self, torch: Any) -> None:
        p, a = self.plan, self.facts.applied
        if p.threads.intra_op is not None:
            torch.set_num_threads(p.threads.intra_op)
            record(a, "threads", "applied", f"torch.set_num_threads({p.threads.intra_op})")
        if p.threads.inter_op is not None:
            torch.set_num_interop_threads(p.threads.inter_op)
        if p.backend.matmul_precision is not None:
            torch.set_float32_matmul_precision(p.backend.matmul_precision)
            record(a, "matmul_precision", "applied", str(p.backend.matmul_precision))
        if p.backend.cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = p.backend.cudnn_benchmark
            record(a, "cudnn_benchmark", "applied", str(p.backend.cudnn_benchmark))

    def _parallel_knobs(self, torch: Any) -> None:
        """The plan's DDP knobs into the script's own DDP; any other strategy is refused (the script owns it)."""
        from torchsmith.inject import ddp
        from torchsmith.plan import DDP, Single

        p = self.plan.parallel
        if not isinstance(p, (DDP, Single)):
            ddp.refuse_strategy(p, self.facts.applied)
        if not torch.distributed.is_available():
            return
        if isinstance(p, DDP) and ddp.changed_fields(p):
            ddp.patch_ddp(p, self.facts.applied, self.facts.ddp)
        elif self.tuning:
            ddp.observe_ddp(self.facts.ddp)  # the tuner searches DDP knobs only for a script that builds a DDP

    def _needs_model(self) -> bool:
        from torchsmith.plan import FP32, NoCheckpointing

        p = self.plan
        return (
            p.compile.enabled or not isinstance(p.precision, FP32) or not isinstance(p.checkpointing, NoCheckpointing)
        )

    # -- finding the trained model ----------------------------------------------------------

    def _forward_pre(self, module: Any, args: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        self._depth += 1
        if self._depth == 1 and module.training and torch.is_grad_enabled():
            if all(r() is not module for r in self._called):
                self._called.append(weakref.ref(module))
            device = next((p.device.type for p in module.parameters()), "cpu")
            if torch.is_autocast_enabled(device):
                record(self.facts.applied, "precision", "as_written",
                       "the script (or its framework) runs the forward under autocast already", keep=True)

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if not torch.compiler.is_compiling():
            self._depth = max(0, self._depth - 1)

    def _trained_model(self, optimizer: Any) -> Any:
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best, best_n = None, 0
        for ref in self._called:
            m = ref()
            if m is None:
                continue
            n = sum(p.numel() for p in m.parameters() if id(p) in held)
            if n > best_n:  # the earliest of equals: the outermost one (a wrapper is called first)
                best, best_n = m, n
        return best

    # -- the step hooks ---------------------------------------------------------------------

    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer is None:
            self._optimizer = weakref.ref(optimizer)  # the trained optimizer: the first one to step
        if self.tuning and self._optimizer() is optimizer and not _cuda_in_use():
            self._step_started = time.perf_counter()

    def _find_model(self, optimizer: Any) -> None:
        """At the end of the first step. Not at its start: Lightning and other closure-style loops
        run the forward inside ``optimizer.step(closure)``."""
        for h in self._forward_hooks:
            h.remove()
        self._forward_hooks = []
        model = self._trained_model(optimizer)
        self.facts.optimizer = _optimizer_facts(optimizer)
        if self.plan.optimizer.impl != "as_written" and "optimizer" not in self.facts.applied:
            record(self.facts.applied, "optimizer", "not_applied",
                   f"{type(optimizer).__name__} is not a torch.optim optimizer that takes foreach= or fused=")
        if model is None:
            if self._needs_model():
                record(self.facts.applied, "model", "not_applied",
                       "no module whose parameters this optimizer holds was called in training mode during "
                       "its first step")
            return
        self.facts.model = type(model).__name__
        self.facts.device = str(next(model.parameters()).device)
        from torchsmith.inject import knobs

        knobs.apply_model_knobs(model, self.plan, self.facts.applied)

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._optimizer is None or self._optimizer() is not optimizer:
            return
        if self._step_started is not None:
            self.facts.optimizer_step_seconds.append(time.perf_counter() - self._step_started)
            self._step_started = None
        if self._forward_hooks:
            self._find_model(optimizer)
        if not self.tuning:
            return
        import torch

        if _cuda_in_use():
            torch.cuda.synchronize()  # CPU-GPU sync point: the step's kernels end before its time is taken
        f = self.facts
        f.step_ends.append(time.perf_counter())
        f.losses.append(self._loss)
        self._loss = 0.0
        f.steps += 1
        if f.steps == 1 and not self._claim():
            self.tuning = False  # another process of this command is the measured one
            return
        if f.steps >= self.spec.warmup + self.spec.window:
            f.window_done = True
            self.write_result()
            raise SystemExit(0)  # unwinds the script's frames: its `finally` blocks still run

    # -- loss, files, result ----------------------------------------------------------------

    def _patch_backward(self, torch: Any) -> None:
        inj = self
        tensor_backward, autograd_backward = torch.Tensor.backward, torch.autograd.backward

        def note(t: Any) -> None:
            if not inj._in_backward and isinstance(t, torch.Tensor) and t.numel() == 1:
                inj._loss += float(t.detach())  # a host sync, only while tuning

        @contextlib.contextmanager
        def inside_backward() -> Any:
            # A backward called from inside another (e.g. by a hook) is not a new loss.
            inj._in_backward, outer = True, inj._in_backward
            try:
                yield
            finally:
                inj._in_backward = outer

        def backward(self, *a: Any, **k: Any) -> Any:
            note(self)
            with inside_backward():
                return tensor_backward(self, *a, **k)

        def autograd(tensors: Any, *a: Any, **k: Any) -> Any:
            for t in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
                note(t)
            with inside_backward():
                return autograd_backward(tensors, *a, **k)

        torch.Tensor.backward = backward
        torch.autograd.backward = autograd

    def _audit(self, event: str, args: tuple) -> None:
        if event != "open" or not self.tuning:
            return
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND)
        )
        if writing and len(self._written) < 1000:
            path = os.fsdecode(path)
            if not path.startswith(("/dev/", "/proc/")) and not path.startswith(self.spec.out_dir or "\0"):
                self._written.add(os.path.abspath(path))

    def _out_dir(self) -> Path:
        if self.spec.out_dir is None:  # only a tune run has one; `run --plan` never claims or writes
            raise RuntimeError("torchsmith injection: no output directory for this run")
        return Path(self.spec.out_dir)

    def _claim(self) -> bool:
        if self._claimed is None and os.environ.get("RANK", "0") != "0":
            # Under torchrun the measured process is rank 0 in every run, never whichever rank steps
            # first: the loss guard compares the per-step losses of the same rank.
            self._claimed = False
        if self._claimed is None:
            try:
                fd = os.open(self._out_dir() / "claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                self._claimed = True
                self.facts.rank = int(os.environ["RANK"]) if "RANK" in os.environ else None
            except FileExistsError:
                self._claimed = False
        return self._claimed

    def write_result(self) -> None:
        if not self._claimed:
            return
        import torch

        f = self.facts
        from torchsmith.inject import ddp
        from torchsmith.plan import DDP

        if isinstance(self.plan.parallel, DDP) and ddp.changed_fields(self.plan.parallel) and not f.ddp:
            ddp.no_ddp_built(f.applied)
        f.written_files = sorted(self._written)
        if _cuda_in_use():
            f.peak_memory_bytes = torch.cuda.max_memory_allocated()
        else:
            import resource

            f.peak_memory_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        out = self._out_dir()
        (out / "result.json.tmp").write_text(json.dumps(f.__dict__))
        os.replace(out / "result.json.tmp", out / "result.json")


def _cuda_in_use() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _optimizer_facts(optimizer: Any) -> dict[str, Any]:
    groups = optimizer.param_groups
    return {
        "name": type(optimizer).__name__,
        "fused": [g.get("fused") for g in groups],
        "foreach": [g.get("foreach") for g in groups],
        "params": sum(len(g["params"]) for g in groups),
    }


def install_from_env() -> PlanInjection | None:
    raw = os.environ.get(PLAN_ENV_KEY)
    if not raw:
        return None
    gloo_exit.settle_at_exit()  # first, so it runs after every other exit handler
    data = json.loads(raw)
    if "plan_file" in data:  # `run --plan plan.json`: the file, read here
        data["plan"] = json.loads(Path(data.pop("plan_file")).read_text())
    injection = PlanInjection(InjectSpec(**data))
    injection.install()
    if injection.tuning:
        import atexit

        atexit.register(injection.write_result)  # a script that ends before the window keeps its steps
    return injection
