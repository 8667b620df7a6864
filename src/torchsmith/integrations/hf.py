"""Hugging Face ``TrainerCallback``: the NaN sentinel, the gradient monitor and a doctor window in one line.

Example::

    from torchsmith.integrations import TorchsmithTrainerCallback
    cb = TorchsmithTrainerCallback(nonfinite="warn")
    Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb]).train()
    cb.report.doctor.findings
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as err:  # the optional extra is missing
    raise ImportError("torchsmith.integrations.TorchsmithTrainerCallback needs transformers and accelerate: "
                      "pip install 'torchsmith[hf]'") from err

from torchsmith.integrations.render import show
from torchsmith.integrations.watch import Watch, WatchConfig, WatchReport


class TorchsmithTrainerCallback(TrainerCallback):
    """Turns on what ``WatchConfig`` names at train begin; ``report`` holds the findings at train end.

    ``show``: render the reports at train end as ``torchsmith doctor`` / ``debug`` do (main process only).
    ``report_dir``: also write ``doctor.html`` there.
    """

    def __init__(self, cfg: WatchConfig | None = None, *, show: bool = True, report_dir: str | None = None,
                 **cfg_fields: Any):
        self.cfg = cfg or WatchConfig(**cfg_fields)
        self.show, self.report_dir = show, report_dir
        self.watch: Watch | None = None

    @property
    def report(self) -> WatchReport | None:
        return self.watch.report if self.watch is not None else None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.watch = Watch(self.cfg, target=f"HF Trainer {type(model).__name__}")
        self.watch.start(model, optimizer)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        # Called once per optimizer step, after gradient accumulation, before clipping.
        self.watch.before_optimizer_step()

    def on_train_end(self, args, state, control, **kwargs):
        report = self.watch.end()
        if state.is_world_process_zero:
            show(report, self.show, self.report_dir)
