"""Capture a bounded window of training steps with ``torch.profiler``, from any training loop.

Step boundaries come from PyTorch's public global optimizer hooks
(``register_optimizer_step_pre_hook`` / ``..._post_hook``): a training step is one cycle of
the main loop, ended by each ``step()`` of the first optimizer seen to step, whoever wrote the
loop. Other optimizers (a GAN's second one) step inside that cycle; each optimizer's step is
wrapped in a labelled span so the analysis shows each one's share. The profiler starts lazily after the first
step (which carries one-off costs) and follows its ``schedule``: ``wait`` steps unrecorded,
``warmup`` steps traced but discarded, ``active`` steps recorded. Live facts the trace
does not hold (parameter dtypes, optimizer flags, DataLoader settings, anomaly mode,
zero-filled gradients) are read from the objects the hooks see.

Example::

    cap = StepCapture(CaptureConfig(active=3), out_dir)
    with cap:
        for batch in loader:
            train_step(batch)          # anything that calls optimizer.step()
    cap.facts.steps_seen, cap.trace_path
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from torchsmith.measure.fingerprint import usable_cores
from torchsmith.measure.memory import memory_split
from torchsmith.measure.quiet import native_stderr_silenced
from torchsmith.profile.facts import Facts
from torchsmith.profile.phases import OPTIMIZER_LABEL
from torchsmith.profile.thread_probe import ThreadProbe, suspect_threads

MAX_ACTIVE_STEPS = 20
"""Cap on recorded steps: a trace grows linearly with them, and a few steps suffice."""


@dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    """Which steps to record, and how much detail (each detail costs overhead in the window)."""

    wait: int = 1
    """Steps after the first one that run unprofiled (zero-filled gradient checks happen here)."""
    warmup: int = 1
    """Steps traced and discarded: the profiler's own start-up cost lands here."""
    active: int = 3
    """Recorded steps, 1..20. More steps give steadier medians and bigger traces."""
    with_stack: bool = True
    """Python frames in the trace: needed to name the forward, backward and sync sites; the costliest detail
    (``benchmarks/doctor_overhead.py`` measures full against light capture)."""
    record_shapes: bool = True
    """Input shapes and dtypes of each op (top operators, float64 detection)."""
    profile_memory: bool = True
    """Allocation events, for the peak memory of each step."""
    max_trace_mb: float = 200.0
    """Cap on the exported trace; above it the Python frames are dropped from the copy you keep."""
    stop_after: bool = False
    """Stop the script (SystemExit(0)) once the window is captured, instead of letting it run on."""
    probe_threads: bool = True
    """CPU: after the window, time the next steps round-robin at the current and at up to two
    suspected thread counts (thread_probe.py); 3 x PROBE_STEPS more steps, unprofiled (twice as
    many for a close call)."""

    def __post_init__(self) -> None:
        if not 1 <= self.active <= MAX_ACTIVE_STEPS or self.wait < 1 or self.warmup < 0:
            raise ValueError(
                f"profile window wait={self.wait} warmup={self.warmup} active={self.active} is out of range; "
                f"expected wait >= 1, warmup >= 0 and 1 <= active <= {MAX_ACTIVE_STEPS}.\n"
                f"Tip: --steps between 1 and {MAX_ACTIVE_STEPS}."
            )

    @property
    def steps_needed(self) -> int:
        """Optimizer steps the script must run to fill the window (the first, unprofiled, included)."""
        return 1 + self.wait + self.warmup + self.active


class StepCapture:
    """Hooks, a scheduled profiler and the facts of one capture; see the module docstring."""

    def __init__(self, cfg: CaptureConfig, out_dir: str | os.PathLike,
                 claim: Callable[[], bool] | None = None, on_done: Callable[[StepCapture], None] | None = None):
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.trace_path = self.out_dir / "trace.json"
        self.facts = Facts(config=dataclasses.asdict(cfg))
        self._claim = claim or (lambda: True)
        self._on_done = on_done
        self._prof: torch.profiler.profile | None = None
        self._handles: list[Any] = []
        self._depth = 0
        self._models: dict[int, weakref.ref] = {}
        self._optimizers: dict[int, weakref.ref] = {}
        self._loader_ids: set[int] = set()
        self._orig_iter: Callable[..., Any] | None = None
        self.active = False
        self._last_step_end = 0.0
        self._primary: int | None = None  # id() of the optimizer whose steps end a loop cycle
        self._labels: dict[int, Any] = {}  # id(optimizer) -> its open labelled span
        self._probe: ThreadProbe | None = None

    # -- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> StepCapture:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.utils.data import DataLoader

        self._handles = [
            register_optimizer_step_pre_hook(self._pre_step),
            register_optimizer_step_post_hook(self._post_step),
            register_module_forward_pre_hook(self._forward_pre),
            register_module_forward_hook(self._forward_post, always_call=True),
        ]
        # DataLoader settings are not in the trace; note them when a loader starts an epoch.
        self._orig_iter = orig = DataLoader.__iter__
        capture = self

        def __iter__(loader):  # noqa: N807 - installed as DataLoader.__iter__
            capture._note_loader(loader)
            return orig(loader)

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]  # deliberate patch, undone by uninstall

    def uninstall(self) -> None:
        from torch.utils.data import DataLoader

        for h in self._handles:
            h.remove()
        self._handles = []
        if self._orig_iter is not None:
            DataLoader.__iter__ = self._orig_iter  # type: ignore[method-assign]  # restores the original
            self._orig_iter = None

    def finish(self) -> None:
        """Stop profiling (a partial window is kept), remove every hook, write facts.json.

        Runs at exit too, after a Ctrl-C: a second Ctrl-C is held off until the window is written.
        """
        with _sigint_deferred():
            if self._prof is not None:
                with native_stderr_silenced():
                    self._prof.stop()  # in RECORD state this exports what was recorded
                self._prof = None
            self.uninstall()
            if self._probe is not None:
                self._probe.restore()
                self.facts.thread_probe = self._probe.result()
                self._probe = None
            if not self.facts.threads:
                self.facts.threads = self._threads()
            if self.active:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                (self.out_dir / "facts.json").write_text(self.facts.to_json())

    def _threads(self) -> dict[str, int]:
        return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
                "cores": usable_cores()}

    # -- hooks ----------------------------------------------------------------------

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if id(optimizer) not in self._optimizers:
            self._optimizers[id(optimizer)] = weakref.ref(optimizer)
            self.facts.optimizers.append(_optimizer_facts(optimizer))
        if self._prof is not None:
            index = list(self._optimizers).index(id(optimizer)) + 1
            label = torch.autograd.profiler.record_function(f"{OPTIMIZER_LABEL}#{index} {type(optimizer).__name__}")
            label.__enter__()
            self._labels[id(optimizer)] = label

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        label = self._labels.pop(id(optimizer), None)
        if label is not None:
            label.__exit__(None, None, None)
        if self._primary is None:
            self._primary = id(optimizer)
        if id(optimizer) != self._primary:
            return  # a second optimizer steps inside the main one's cycle: no step boundary
        if self._probe is not None:
            self._probe_step(self._probe)
            return
        f = self.facts
        f.steps_seen += 1
        if f.steps_seen == 1:
            if not self._claim():
                self.uninstall()  # another process of this run is the one being profiled
                return
            self.active = True
            self._start_profiler()
            self._last_step_end = time.perf_counter()
            return
        if self._prof is None:
            return
        now = time.perf_counter()
        if self._prof.current_action == torch.profiler.ProfilerAction.NONE:
            f.unprofiled_step_seconds.append(now - self._last_step_end)
        if self._prof.current_action in (torch.profiler.ProfilerAction.RECORD,
                                         torch.profiler.ProfilerAction.RECORD_AND_SAVE):
            f.steps_recorded += 1
        if f.steps_seen == 1 + self.cfg.wait + self.cfg.warmup:
            # Just before the first recorded step opens, so the walk over the state is not
            # timed as part of it. Params and optimizer state no longer change size after the
            # first step, and gradients are allocated at this point of every step.
            self._note_memory(optimizer)
        with native_stderr_silenced():  # a schedule transition starts/stops Kineto, which chatters
            self._prof.step()  # ends this step's ProfilerStep#N span and opens the next
        if f.steps_seen == self.cfg.steps_needed:
            self._done()

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return  # never traced into a compiled graph (it would break it or recompile)
        self._depth += 1
        if self._depth != 1 or not self.active or not module.training or not torch.is_grad_enabled():
            return
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            return  # e.g. a loss module called at top level
        if id(module) not in self._models:
            self._note_model(module, params)
        f = self.facts
        f.anomaly_enabled |= torch.is_anomaly_enabled()
        f.autocast_enabled |= torch.is_autocast_enabled(params[0].device.type)
        if self._prof is not None and self._prof.current_action == torch.profiler.ProfilerAction.NONE:
            # Outside the traced steps only: `.any()` is a CPU-GPU sync point.
            grads = [p.grad for p in params if p.grad is not None]
            f.grad_checks += 1
            if grads and not any(bool(g.any()) for g in grads):
                f.grads_zero_filled += 1
                f.zero_filled_grad_bytes = sum(g.numel() * g.element_size() for g in grads)

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not torch.compiler.is_compiling():
            self._depth = max(0, self._depth - 1)

    # -- helpers ----------------------------------------------------------------------

    def _start_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        cfg = self.cfg
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(self.trace_path)),
            record_shapes=cfg.record_shapes, profile_memory=cfg.profile_memory, with_stack=cfg.with_stack,
        )
        # The schedule counts from the step that starts now (the script's second): `wait`
        # steps unprofiled (the zero-filled gradient check runs there), then warmup, then active.
        with native_stderr_silenced():
            self._prof.start()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()

    def _note_memory(self, optimizer: torch.optim.Optimizer) -> None:
        model = next((r() for r in self._models.values() if r() is not None), None)
        if model is None:
            return
        split = memory_split(model, optimizer)
        self.facts.memory = {"params": split.params, "grads": split.grads, "optimizer_state": split.optimizer_state}
        self.facts.live_bytes = split.total

    def _note_model(self, module: torch.nn.Module, params: list[torch.nn.Parameter]) -> None:
        self._models[id(module)] = weakref.ref(module)
        f = self.facts
        if sum(p.numel() for p in params) >= sum(f.param_numel_by_dtype.values()):
            f.model = type(module).__name__
            f.device = str(params[0].device)
            counts: dict[str, int] = {}
            for p in module.parameters():
                key = str(p.dtype).removeprefix("torch.")
                counts[key] = counts.get(key, 0) + p.numel()
            f.param_numel_by_dtype = counts

    def _note_loader(self, loader: Any) -> None:
        if id(loader) in self._loader_ids:
            return
        self._loader_ids.add(id(loader))
        self.facts.loaders.append({
            "num_workers": loader.num_workers, "pin_memory": bool(loader.pin_memory),
            "persistent_workers": bool(loader.persistent_workers), "prefetch_factor": loader.prefetch_factor,
            "batch_size": loader.batch_size, "dataset": type(loader.dataset).__name__,
        })

    def _done(self) -> None:
        self.facts.window_done = True
        if torch.cuda.is_available():
            self.facts.cuda_peak_bytes = torch.cuda.max_memory_allocated()
        if self._prof is not None:
            with native_stderr_silenced():
                self._prof.stop()
            self._prof = None
        self.facts.threads = self._threads()
        if self._start_probe():
            return  # the probe's steps run first; they end with _end_probe
        self._complete()

    def _complete(self) -> None:
        self.finish()  # hooks go: the rest of the run is unprofiled and full speed
        if self._on_done is not None:
            self._on_done(self)

    def _start_probe(self) -> bool:
        if not self.cfg.probe_threads or self.facts.device.startswith("cuda"):
            return False
        t = self.facts.threads
        suspects = suspect_threads(t["intra_op"], t["cores"], sum(ld["num_workers"] for ld in self.facts.loaders))
        if not suspects:
            return False
        self._probe = ThreadProbe(t["intra_op"], suspects)
        self._probe.start()
        self._last_step_end = time.perf_counter()
        return True

    def _probe_step(self, probe: ThreadProbe) -> None:
        now = time.perf_counter()
        probe.record(now - self._last_step_end)
        self._last_step_end = time.perf_counter()  # the switch itself is not timed
        if probe.done:
            self._complete()


class _sigint_deferred:  # noqa: N801 - used as a function
    """Hold SIGINT while the window is exported; a Ctrl-C that arrived meanwhile acts after."""

    def __enter__(self) -> None:
        self._held = hasattr(signal, "pthread_sigmask")
        if self._held:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def __exit__(self, *exc: object) -> None:
        if self._held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _optimizer_facts(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    groups = optimizer.param_groups
    params = [p for g in groups for p in g["params"]]
    return {
        "name": type(optimizer).__name__,
        "params": len(params),
        "device": str(params[0].device) if params else "cpu",
        "foreach": [g.get("foreach") for g in groups],
        "fused": [g.get("fused") for g in groups],
        "supports_foreach": "foreach" in optimizer.defaults,
        "supports_fused": "fused" in optimizer.defaults,
    }
