"""--verify: a loader fix is measured through the engine, data wait included."""

import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchsmith.plan import LoaderConfig, Plan
from torchsmith.profile.analysis import StepBreakdown, TraceAnalysis
from torchsmith.profile.capture import Facts
from torchsmith.profile.doctor import DoctorReport, verify
from torchsmith.profile.rules import Finding
from torchsmith.workload import Workload, load_workload


class SleepyDataset(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.004)  # a decode: 32 ms per batch of 8, in series with the step unless workers run it
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, generator=g), torch.randn(1, generator=g)


def _loader(cfg: LoaderConfig):
    workers = cfg.num_workers or 0
    return DataLoader(SleepyDataset(), batch_size=8, num_workers=workers,
                      persistent_workers=bool(cfg.persistent_workers) and workers > 0,
                      prefetch_factor=cfg.prefetch_factor if workers else None)


def _workload():
    return Workload(model=lambda: torch.nn.Linear(8, 1), batches=_loader(LoaderConfig()), loader=_loader,
                    loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
                    optimizer=lambda p: torch.optim.SGD(p, lr=0.01), name="sleepy")


def _report(plan):
    finding = Finding("data-bound", "waits", "high", ["e"], "fix", "gain", 0.9, plan)
    facts = Facts(config={"plan": Plan().to_dict()})
    return DoctorReport("w", "workload", TraceAnalysis(steps=[StepBreakdown(1.0, {})]), facts, [finding], None)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_loader_fix_is_verified_with_the_data_wait():
    report = _report(Plan(loader=LoaderConfig(num_workers=2, persistent_workers=True, prefetch_factor=4)))
    [v] = verify(_workload(), report, steps=6)
    assert v.error is None, v.error
    assert v.speedup > 1.3  # 2 workers decode ahead of a step that is almost all data wait
    assert v.loss_rel_diff < 1e-6  # same batches, same order: workers do not change the maths


def test_a_workload_without_loader_factory_reports_why():
    [v] = verify(load_workload("mlp"), _report(Plan(loader=LoaderConfig(num_workers=2))), steps=1)
    assert v.speedup is None and "loader factory" in v.error
