"""Small workloads for engine tests: dropout and a shuffling DataLoader exercise every RNG."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from torchsmith.workload import Workload


def dropout_workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=g)
    y = x.sum(1, keepdim=True)
    # shuffle=True without a generator draws from the global RNG at each epoch's start.
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    return Workload(
        model=lambda: torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.3), torch.nn.ReLU(),
                                          torch.nn.Linear(32, 1)),
        batches=loader,
        loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
        optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
        scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5),
        eval_batches=[(x[:50], y[:50])],
        samples_per_batch=32,
        name="dropout-toy",
    )


def loader_workload() -> Workload:
    """A linear model fed by a DataLoader factory: plans can set its workers."""
    from torchsmith.plan import LoaderConfig

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(512, 8, generator=g), torch.randn(512, 1, generator=g))

    def loader(cfg: LoaderConfig) -> DataLoader:
        workers = cfg.num_workers or 0
        return DataLoader(data, batch_size=16, num_workers=workers, persistent_workers=bool(cfg.persistent_workers),
                          prefetch_factor=cfg.prefetch_factor if workers else None)

    return Workload(model=lambda: torch.nn.Linear(8, 1), batches=loader(LoaderConfig()), loader=loader,
                    loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
                    optimizer=lambda p: torch.optim.SGD(p, lr=0.01), name="loader-toy")
