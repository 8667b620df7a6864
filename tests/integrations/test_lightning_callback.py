"""TorchsmithCallback in a real Lightning Trainer: doctor window, gradient monitor, NaN policies."""

import importlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning")

from torchsmith.debug.nan_sentinel import NonFiniteError
from torchsmith.integrations import TorchsmithCallback
from torchsmith.profile.capture import CaptureConfig

WINDOW = CaptureConfig(active=2, probe_threads=False)  # 5 optimizer steps


class LitNet(L.LightningModule):
    def __init__(self, nan_at: int | None = None):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 1)
        self.nan_at = nan_at

    def forward(self, x):
        h = self.a(x)
        if self.nan_at is not None and self.global_step == self.nan_at:
            h = torch.log(h - 100.0)  # the parent's own code makes a NaN
        return self.b(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)  # the op-level replay must not log the step twice
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(model, steps, accumulate_grad_batches=1, **kw):
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(256, 16), torch.randn(256, 1)), batch_size=32)
    cb = TorchsmithCallback(show=False, capture=WINDOW, **kw)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
                        accumulate_grad_batches=accumulate_grad_batches)
    trainer.fit(model, loader)
    return cb, trainer


def test_clean_run_gives_a_doctor_report_and_gradient_norms(tmp_path):
    torch.manual_seed(0)
    cb, _ = _fit(LitNet(), 7, report_dir=str(tmp_path))
    r = cb.report
    assert r.doctor is not None and r.doctor_error is None
    a = r.doctor.analysis
    assert len(a.steps) == 2 and a.share("forward") > 0 and a.share("backward") > 0
    assert r.nan_findings == [] and r.grads.steps == list(range(1, 8)) and r.grads.layers == ["a", "b"]
    assert (tmp_path / "doctor.html").exists()


def test_raise_names_the_op_and_the_parent_module_whose_code_made_the_nan():
    torch.manual_seed(0)
    with pytest.raises(NonFiniteError) as err:
        _fit(LitNet(nan_at=2), 7, nonfinite="raise", doctor=False)
    text = str(err.value)
    assert "module the root module in op aten.log.default" in text  # the replay named the op
    assert "born in the root module's own forward code, after child a" in text and "debug nan" not in text


def test_skip_step_leaves_the_parameters_untouched_on_the_bad_step():
    torch.manual_seed(0)
    model = LitNet(nan_at=2)
    cb, trainer = _fit(model, 6, nonfinite="skip_step", doctor=False)
    (found,) = cb.report.nan_findings
    assert cb.report.skipped_steps == 1 and found.module == "" and found.op == "aten.log.default" and found.reproduced
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert "log" not in vars(model) and "train_loss" in trainer.callback_metrics  # logging is the module's own again


def test_with_gradient_accumulation_the_finding_names_the_module_only():
    # Two batches make one optimizer step: the last batch alone is not the step, so no replay.
    torch.manual_seed(0)
    cb, _ = _fit(LitNet(nan_at=1), 4, nonfinite="skip_step", doctor=False, accumulate_grad_batches=2)
    (found,) = cb.report.nan_findings
    assert found.module == "" and found.op is None


def test_without_lightning_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "torchsmith.integrations.lightning", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'torchsmith\[lightning\]'"):
        importlib.import_module("torchsmith.integrations.lightning")
