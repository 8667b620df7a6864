"""What the framework adapters share: the NaN sentinel, the gradient monitor and a doctor window,
driven from three points of any trainer (train start, just before each optimizer step, train end).

The adapters only translate their framework's callback calls into these three; the work and
the reports are the library's own (``debug.nan_sentinel``, ``debug.grad_monitor``,
``profile.capture``/``profile.doctor``), so a callback reports exactly what the CLI would.

Example::

    watch = Watch(WatchConfig(nonfinite="skip_step"))
    watch.start(model, optimizer)
    for batch in loader:
        loss_fn(model, batch).backward()
        watch.before_optimizer_step()      # one sync: non-finite? then raise / skip / warn
        optimizer.step(); optimizer.zero_grad()
    report = watch.end()                   # WatchReport: doctor, nan findings, gradient report
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from torchsmith.debug.grad_monitor import GradMonitor, GradReport
from torchsmith.debug.nan_sentinel import NaNSentinel, NonFiniteError, NonfiniteOrigin
from torchsmith.profile.capture import CaptureConfig, StepCapture
from torchsmith.profile.doctor import DoctorError, DoctorReport, report_capture
from torchsmith.text import first_line

log = logging.getLogger("torchsmith.integrations")


@dataclass(frozen=True, kw_only=True)
class WatchConfig:
    """What a training callback turns on. Each part costs a little on every step; turn off what you do not need."""

    nonfinite: Literal["raise", "skip_step", "warn"] | None = "raise"
    """Plan.nonfinite policy on a step with a NaN/Inf in a module output, the loss or the gradients:
    raise (NonFiniteError naming the module), skip_step (the optimizer step is skipped: every
    gradient is set to None, so no parameter or optimizer state moves), warn (log and step on).
    None: no sentinel. One host-device sync per step; in Lightning also a copy of torch's RNG state
    (``benchmarks/rng_snapshot.py`` measures its cost) for the op-level replay of a bad step."""
    grad_monitor: bool = True
    """Per-layer gradient norms before each optimizer step (one device-to-host copy per step)."""
    grad_every: int = 1
    """Record the gradient norms every k-th step; more is cheaper."""
    doctor: bool = True
    """Capture a doctor window (a few profiled steps after the first ones) and diagnose it at train end."""
    capture: CaptureConfig = field(default_factory=lambda: CaptureConfig(active=3))
    """The doctor window; the run needs capture.steps_needed optimizer steps to fill it."""
    trace: str | None = None
    """Keep the doctor's Chrome/Perfetto trace at this path (size-capped)."""


@dataclass
class WatchReport:
    """Everything one training run's callback found; render with ``torchsmith.report`` as the CLI does."""

    doctor: DoctorReport | None
    doctor_error: str | None
    """Why there is no doctor report (e.g. the run ended before the window), or None."""
    nan_findings: list[NonfiniteOrigin]
    skipped_steps: int
    grads: GradReport | None


class Watch:
    """The sentinel, the monitor and the capture of one training run; see the module docstring."""

    def __init__(self, cfg: WatchConfig | None = None, target: str = "training run"):
        self.cfg = cfg or WatchConfig()
        self.target = target
        self.findings: list[NonfiniteOrigin] = []
        self.skipped = 0
        self._sentinel: NaNSentinel | None = None
        self._monitor: GradMonitor | None = None
        self._capture: StepCapture | None = None
        self._tmp: str | None = None
        self._model: nn.Module | None = None
        self.report: WatchReport | None = None
        """Set by :meth:`end` (also when a non-finite step raised)."""

    def start(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """At train start, once the model (and optimizer) exist."""
        self._model = model
        if self.cfg.nonfinite is not None:
            self._sentinel = NaNSentinel(model)
        if self.cfg.grad_monitor:
            # Recorded from before_optimizer_step: a framework's optimizer wrapper may not take hooks.
            self._monitor = GradMonitor(model, every=self.cfg.grad_every)
        if self.cfg.doctor:
            self._tmp = tempfile.mkdtemp(prefix="torchsmith-doctor-")
            self._capture = StepCapture(self.cfg.capture, self._tmp)
            self._capture.install()

    def before_optimizer_step(self, loss: torch.Tensor | None = None,
                              replay: tuple[Callable[[], Any], dict[str, Any]] | None = None) -> bool:
        """Gradients are ready. Returns False when the step was made a no-op (skip_step).

        ``replay``: (the step's forward + backward, the RNG state it started with), when the
        adapter can re-run it; a non-finite step is then replayed op by op to name the op."""
        if self._monitor is not None:
            self._monitor.record()
        if self._sentinel is None:
            return True
        found = self._sentinel.check(loss)  # the one sync of this step
        if found is None:
            return True
        if replay is not None:
            found = self._sentinel.refine(found, *replay)
        self.findings.append(found)
        if self.cfg.nonfinite == "raise":
            self.report = self.end()  # the run stops here: keep what was found, remove every hook
            locate = "" if found.op else "`torchsmith debug nan` re-runs a step op by op to name the op; "
            raise NonFiniteError(f"{found.describe()}.\nTip: {locate}for an overflow lower the learning rate or "
                                 "clip gradients; nonfinite='skip_step' skips such steps instead.")
        if self.cfg.nonfinite == "skip_step":
            assert self._model is not None  # start() set it, with the sentinel
            for p in self._model.parameters():
                p.grad = None  # torch optimizers leave a parameter without a gradient untouched
            self.skipped += 1
        log.warning("non-finite step: %s%s", found.describe(),
                    "; optimizer step skipped" if self.cfg.nonfinite == "skip_step" else "")
        return self.cfg.nonfinite != "skip_step"

    def end(self) -> WatchReport:
        """At train end: remove every hook, diagnose the captured window."""
        doctor, error = None, None
        if self._capture is not None:
            self._capture.finish()
            try:
                doctor = report_capture(self._capture, self.target, trace=self.cfg.trace)
            except (DoctorError, ValueError) as err:
                error = first_line(err)
            assert self._tmp is not None  # start() made it, with the capture
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._capture = None
        grads = None
        if self._monitor is not None:
            grads = self._monitor.report()
            self._monitor.close()
            self._monitor = None
        if self._sentinel is not None:
            self._sentinel.close()
            self._sentinel = None
        if self.report is None or doctor is not None or grads is not None:
            self.report = WatchReport(doctor, error, list(self.findings), self.skipped, grads)
        return self.report
