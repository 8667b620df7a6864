"""cnn-mini: a ~175k-parameter ResNet on procedurally generated 32x32 RGB images.

Ten classes, each a distinct pattern family (four grating orientations, disc,
ring, square, plus sign, checkerboard, X), drawn with random foreground and
background colours, random shift, rotation jitter, scale, phase and pixel noise.
Colour carries no label information, so the network has to learn shape and
orientation. Generation is vectorised and takes well under a second.

Example::

    from torchsmith.workloads.cnn_mini import workload
    w = workload(seed=0)
    x, y = next(iter(w.iter_batches()))      # (64, 3, 32, 32) float32, (64,) int64
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.workload import Workload
from torchsmith.workloads._batches import STREAM_DATA, ShuffledBatches, generator
from torchsmith.workloads.cnn_pipeline import train_pipeline

__all__ = ["BasicBlock", "ResNetMini", "make_images", "workload"]

NUM_CLASSES = 10
IMAGE_SIZE = 32


def make_images(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 3, 32, 32)`` uint8 and labels ``(n,)`` int64, balanced over 10 classes."""
    labels = torch.arange(n) % NUM_CLASSES
    labels = labels[torch.randperm(n, generator=g)]
    u = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731 - uniform [0, 1)

    # Per-image nuisance parameters, all drawn up front so the stream of draws has a fixed order.
    shift = ((u(n, 2) - 0.5) * 0.6)[:, :, None, None]  # up to +-0.3 of the half-width = +-4.8 pixels
    theta = ((u(n) - 0.5) * math.radians(30))[:, None, None]  # rotation jitter, +-15 degrees
    scale = (0.7 + 0.6 * u(n))[:, None, None]  # object size and grating period jitter
    phase = (u(n) * 2 * math.pi)[:, None, None]
    # Foreground and background colours differ by at least 0.3 per channel (mod 1), so shapes stay visible.
    fg = u(n, 3)
    bg = (fg + 0.3 + 0.4 * u(n, 3)) % 1.0
    lin = torch.linspace(-1.0, 1.0, IMAGE_SIZE)
    gy, gx = torch.meshgrid(lin, lin, indexing="ij")  # (H, W) each, in [-1, 1]

    def soft(d: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(d / 0.06)  # anti-aliased edge: ~1 where the signed distance d > 0

    def pattern(c: int, i: torch.Tensor) -> torch.Tensor:
        """Class ``c``'s intensity map in [0, 1] for the images ``i``: (len(i), H, W)."""
        x0, y0 = gx - shift[i, 0], gy - shift[i, 1]  # (m, H, W)
        cos, sin = theta[i].cos(), theta[i].sin()
        x, y = cos * x0 - sin * y0, sin * x0 + cos * y0  # rotated coordinates
        r = torch.sqrt(x * x + y * y)
        f, ph = 3.0 * math.pi / scale[i], phase[i]  # 2.3-4.3 grating periods across the image
        size, bar = 0.55 * scale[i], 0.16 * scale[i]  # object radius, stroke half-width
        if c < 4:  # gratings at 0, 45, 90, 135 degrees
            a = math.radians(45 * c)
            return 0.5 + 0.5 * torch.sin(f * (x * math.cos(a) + y * math.sin(a)) + ph)
        if c == 4:  # disc
            return soft(size - r)
        if c == 5:  # ring
            return soft(0.5 * bar - (r - 0.7 * size).abs())
        if c == 6:  # square
            return soft(0.85 * size - torch.maximum(x.abs(), y.abs()))
        if c == 7:  # plus sign, clipped to the object radius
            return soft(torch.minimum(torch.maximum(bar - x.abs(), bar - y.abs()), size - r))
        if c == 8:  # checkerboard
            return (torch.sign(torch.sin(f * x + ph) * torch.sin(f * y + ph)) + 1) / 2
        # c == 9: X, the plus sign's arms along the diagonals
        d1, d2 = (x - y).abs() / math.sqrt(2), (x + y).abs() / math.sqrt(2)
        return soft(torch.minimum(torch.maximum(bar - d1, bar - d2), size - r))

    # One class at a time, on its own images only: peak memory stays at a tenth of the float set.
    images = torch.empty(n, 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
    for c in range(NUM_CLASSES):
        i = (labels == c).nonzero().squeeze(1)
        mask = pattern(c, i)[:, None]  # (m, 1, H, W)
        img = bg[i, :, None, None] + (fg - bg)[i, :, None, None] * mask  # (m, 3, H, W)
        img = img + 0.12 * torch.randn(img.shape, generator=g)  # pixel noise
        images[i] = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return images, labels


class Normalize:
    """uint8 images -> float32, per-channel standardised. A picklable collate for :class:`ShuffledBatches`."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean = mean.view(1, 3, 1, 1)  # in 0..255 units
        self.std = std.view(1, 3, 1, 1)

    def __call__(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = batch  # (B, 3, H, W) uint8, (B,) int64
        return (images.float() - self.mean) / self.std, labels


class BasicBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus a shortcut (1x1 conv when the shape changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)  # BN supplies the bias
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))  # (B, c_out, H/s, W/s)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetMini(nn.Module):
    """Stem conv, stages of :class:`BasicBlock` in ``self.blocks``, global average pool, linear ``head``."""

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64), blocks_per_stage: int = 2, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks, c_in = [], widths[0]
        for i, c_out in enumerate(widths):
            for j in range(blocks_per_stage):
                # Each stage after the first halves H and W in its first block: 32 -> 16 -> 8.
                blocks.append(BasicBlock(c_in, c_out, stride=2 if (i > 0 and j == 0) else 1))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))  # (B, 3, 32, 32) -> (B, C, 8, 8)
        return self.head(x.mean(dim=(2, 3)))  # global average pool: (B, C) -> (B, classes)


def cnn_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch  # (B, 3, 32, 32) float32, (B,) int64
    return F.cross_entropy(model(images), labels)


def workload(
    seed: int = 0,
    *,
    batch_size: int = 64,
    train_images: int = 5120,
    val_images: int = 1024,
    widths: tuple[int, ...] = (16, 32, 64),
    blocks_per_stage: int = 2,
    lr: float = 0.05,
) -> Workload:
    """The built-in image classification workload (SGD with Nesterov momentum).

    >>> w = workload(seed=0, train_images=640, val_images=128)
    >>> w.name, len(w.iter_batches())
    ('cnn-mini', 10)
    """
    g = generator(seed, STREAM_DATA)
    images, labels = make_images(train_images + val_images, g)
    train_x, val_x = images[:train_images], images[train_images:]
    train_y, val_y = labels[:train_images], labels[train_images:]
    # Normalisation statistics from the training split only.
    flat = train_x.permute(1, 0, 2, 3).reshape(3, -1).float()  # (3, N*H*W)
    norm = Normalize(flat.mean(dim=1), flat.std(dim=1))
    # Training batches come from the realistic input pipeline (compressed images decoded and
    # augmented per sample, num_workers=0 as written); plan.loader rebuilds it via `loader`.
    pipeline = train_pipeline(train_x, train_y, norm.mean, norm.std, batch_size=batch_size, seed=seed)

    return Workload(
        name="cnn-mini",
        seed=seed,
        model=lambda: ResNetMini(widths=tuple(widths), blocks_per_stage=blocks_per_stage),
        batches=pipeline(None),
        loader=pipeline,
        eval_batches=ShuffledBatches(
            (val_x, val_y), batch_size=batch_size, seed=seed, shuffle=False, drop_last=False, collate=norm
        ),
        loss=cnn_loss,
        optimizer=lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4),
        samples_per_batch=batch_size,
        extras={"num_classes": NUM_CLASSES, "train_images": train_images, "val_images": val_images},
    )
