"""On a GPU: a per-step `.item()` is a real sync and shows as one; fp32 without autocast is flagged."""

import os
import sys
from pathlib import Path

import pytest
import torch

from torchsmith.profile.capture import CaptureConfig
from torchsmith.profile.doctor import doctor_script

SCRIPT = """
import torch
from torch import nn
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(512, 1024, device="cuda")
for step in range(10):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    print(loss.item())
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_script_sync_and_fp32(tmp_path):
    script = tmp_path / "gpu_train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    report = doctor_script([sys.executable, str(script)], CaptureConfig(active=3), env=env)
    rules = {f.rule: f for f in report.findings}
    assert report.facts.device.startswith("cuda")
    assert "sync-in-loop" in rules and any("gpu_train.py:12" in e for e in rules["sync-in-loop"].evidence)
    assert "untested-compile-amp" in rules
    assert "single-tensor-optimizer" not in rules and "grad-not-set-to-none" not in rules
    assert report.memory and report.memory["peak"] >= report.memory["params"]
