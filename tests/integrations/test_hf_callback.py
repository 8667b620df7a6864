"""TorchsmithTrainerCallback in a real Hugging Face Trainer (tiny GPT-2 from a config, random init)."""

import importlib
import sys

import pytest
import torch
from torch.utils.data import Dataset

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from torchsmith.integrations import TorchsmithTrainerCallback
from torchsmith.profile.capture import CaptureConfig


class Tokens(Dataset):
    def __init__(self):
        self.ids = torch.randint(0, 128, (64, 32), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_trainer_run_gives_a_doctor_report_without_a_false_float64(tmp_path):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=64,
                                                                 n_layer=2, n_head=2))
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=4,
                                          save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                                          logging_steps=1000)
    cb = TorchsmithTrainerCallback(show=False, capture=CaptureConfig(active=2, probe_threads=False))
    transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    r = cb.report
    assert r.doctor is not None, r.doctor_error
    a = r.doctor.analysis
    assert a.share("forward") > 0 and a.share("backward") > 0
    assert "float64" not in {f.rule for f in r.doctor.findings}  # GELU's 0.5 * x is a Python float, not fp64
    assert r.nan_findings == [] and len(r.grads.steps) == 6


def test_without_transformers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "torchsmith.integrations.hf", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'torchsmith\[hf\]'"):
        importlib.import_module("torchsmith.integrations.hf")
