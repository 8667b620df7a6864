"""Lightning ``Callback``: the NaN sentinel, the gradient monitor and a doctor window in one line.

A non-finite step is replayed op by op (its batch and starting RNG state are kept each step) to
name the op, as ``torchsmith debug nan`` does, where one batch makes one optimizer step through
``training_step``; with gradient accumulation or manual optimization the finding names the module.

Example::

    from torchsmith.integrations import TorchsmithCallback
    cb = TorchsmithCallback(nonfinite="skip_step")
    L.Trainer(max_steps=100, callbacks=[cb]).fit(model, loader)
    cb.report.doctor.findings, cb.report.nan_findings, cb.report.grads.flags
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError as err:  # the optional extra is missing
    raise ImportError("torchsmith.integrations.TorchsmithCallback needs Lightning: "
                      "pip install 'torchsmith[lightning]'") from err

from torchsmith.integrations.render import show
from torchsmith.integrations.watch import Watch, WatchConfig, WatchReport
from torchsmith.seeding import torch_rng_state


class TorchsmithCallback(pl.Callback):
    """Turns on what ``WatchConfig`` names at train start; ``report`` holds the findings at train end.

    ``show``: render the reports at train end as ``torchsmith doctor`` / ``debug`` do (rank 0 only).
    ``report_dir``: also write ``doctor.html`` there.
    """

    def __init__(self, cfg: WatchConfig | None = None, *, show: bool = True, report_dir: str | None = None,
                 **cfg_fields: Any):
        super().__init__()
        self.cfg = cfg or WatchConfig(**cfg_fields)
        self.show, self.report_dir = show, report_dir
        self.watch: Watch | None = None
        self._step_start: tuple[Any, int, dict[str, Any]] | None = None

    @property
    def report(self) -> WatchReport | None:
        return self.watch.report if self.watch is not None else None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch = Watch(self.cfg, target=f"Lightning {type(pl_module).__name__}")
        self.watch.start(pl_module, trainer.optimizers[0] if trainer.optimizers else None)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # What a replay of this step needs: its batch and torch's RNG state as it starts (what
        # dropout draws from; Python's and numpy's would cost more, benchmarks/rng_snapshot.py). Only where
        # one batch makes one optimizer step through training_step (no accumulation, no manual
        # optimization, which steps inside training_step).
        if (self.cfg.nonfinite is not None and pl_module.automatic_optimization
                and trainer.accumulate_grad_batches == 1):
            self._step_start = (batch, batch_idx, torch_rng_state())

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        assert self.watch is not None  # Lightning calls on_train_start first
        start, self._step_start = self._step_start, None
        replay = (_replay_training_step(trainer, pl_module, *start[:2]), start[2]) if start else None
        self.watch.before_optimizer_step(replay=replay)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert self.watch is not None  # Lightning calls on_train_start first
        report = self.watch.end()
        if trainer.is_global_zero:
            show(report, self.show, self.report_dir)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self.watch is not None:
            self.watch.end()  # never leave the global optimizer hooks behind


def _replay_training_step(trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                          batch_idx: int) -> Callable[[], None]:
    """The step's forward and backward as Lightning ran them (its precision context included),
    with ``self.log`` silenced: a replay must not log the step twice."""

    def step() -> None:
        with trainer.precision_plugin.train_step_context(), _logging_silenced(pl_module):
            out = pl_module.training_step(batch, batch_idx)
        loss = out["loss"] if isinstance(out, Mapping) else out
        if isinstance(loss, torch.Tensor):  # None: the module skipped this batch
            loss.backward()

    return step


@contextmanager
def _logging_silenced(pl_module: pl.LightningModule) -> Iterator[None]:
    def ignore(*args: Any, **kwargs: Any) -> None:
        pass

    # Instance attributes shadow the methods until they are deleted below.
    pl_module.log = ignore  # type: ignore[method-assign]
    pl_module.log_dict = ignore  # type: ignore[method-assign]
    try:
        yield
    finally:
        del pl_module.log, pl_module.log_dict
