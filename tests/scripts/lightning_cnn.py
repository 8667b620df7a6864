"""A small CNN trained with a real Lightning Trainer (forward and backward run inside
`optimizer.step(closure)`), with Lightning's default Adam.

--planted: the dataset decodes each image on every read (a slow `__getitem__`, as a JPEG
decode would be) in the main process: doctor's data-bound rule must find it.
"""

import argparse
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()


class DecodingDataset(Dataset):
    """Each read 'decodes' an image: 1.5 ms of work per sample, on the training process."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(0.0015)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), int(i % 10)


class LitCNN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


torch.manual_seed(0)
if args.planted:
    data = DecodingDataset(4096)
else:
    data = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(LitCNN(), loader)
print(f"lightning_cnn done: {trainer.global_step} steps")
