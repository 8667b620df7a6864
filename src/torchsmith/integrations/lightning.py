"""Lightning ``Callback``: the NaN sentinel, the gradient monitor and a doctor window in one line.

Example::

    from torchsmith.integrations import TorchsmithCallback
    cb = TorchsmithCallback(nonfinite="skip_step")
    L.Trainer(max_steps=100, callbacks=[cb]).fit(model, loader)
    cb.report.doctor.findings, cb.report.nan_findings, cb.report.grads.flags
"""

from __future__ import annotations

from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as err:  # the optional extra is missing
    raise ImportError("torchsmith.integrations.TorchsmithCallback needs Lightning: "
                      "pip install 'torchsmith[lightning]'") from err

from torchsmith.integrations.render import show
from torchsmith.integrations.watch import Watch, WatchConfig, WatchReport


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

    @property
    def report(self) -> WatchReport | None:
        return self.watch.report if self.watch is not None else None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch = Watch(self.cfg, target=f"Lightning {type(pl_module).__name__}")
        self.watch.start(pl_module, trainer.optimizers[0] if trainer.optimizers else None)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        assert self.watch is not None  # Lightning calls on_train_start first
        self.watch.before_optimizer_step()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert self.watch is not None  # Lightning calls on_train_start first
        report = self.watch.end()
        if trainer.is_global_zero:
            show(report, self.show, self.report_dir)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self.watch is not None:
            self.watch.end()  # never leave the global optimizer hooks behind
