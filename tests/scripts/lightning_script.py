"""A Lightning script (training_step calls a submodule, not self(...)) for the script-tuning tests."""

import argparse
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _observe import Observer  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--observe", default=None)
p.add_argument("--precision", default="32-true")
args = p.parse_args()


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Lit(L.LightningModule):
    def __init__(self, d=32):
        super().__init__()
        self.net = nn.Sequential(*[Block(d) for _ in range(3)], nn.Linear(d, 4))
        self.blocks = [self.net[i] for i in range(3)]

    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


g = torch.Generator().manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(512, 32, generator=g), torch.randint(0, 4, (512,), generator=g)),
                    batch_size=16)
model = Lit()
obs = Observer(args.observe)
obs.watch(model.net[0])


class Dump(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, i):
        if trainer.global_step >= 2:
            obs.dump(model.net, trainer.optimizers[0], blocks=model.blocks, loader=trainer.train_dataloader,
                     steps=trainer.global_step)


trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, precision=args.precision, callbacks=[Dump()])
trainer.fit(model, loader)
