"""cnn-mini: a small ResNet trained at 32x32 from larger, JPEG-compressed procedural photos.

Ten classes, each a distinct pattern family (gratings at 0, 45 and 90 degrees, a radial
grating, disc, ring, square, plus sign, checkerboard, X), drawn with random foreground and
background colours, random shift, rotation jitter, scale, phase and pixel noise. Colour
carries no label information, so the network has to learn shape and orientation. No class
is the mirror image of another, so the horizontal flips of the training augmentation never
turn one class into another: a flipped 45-degree grating is a 135-degree one, which is why
there is no 135-degree class.

The images are rendered at ``SOURCE_SIZE`` (176x176) and stored as JPEG files, as a real
dataset's photos are stored larger than the network's input. Training decodes each one and
augments it on the fly, ImageNet-style (:mod:`torchsmith.workloads.cnn_pipeline`); the
validation images are the same renders resized to 32x32, held in memory. Rendering is
vectorised in chunks of about a million pixels, so memory stays bounded at any size.

Example::

    from torchsmith.workloads.cnn_mini import workload
    w = workload(seed=0)
    x, y = next(iter(w.iter_batches()))      # (64, 3, 32, 32) float32, (64,) int64
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from torchsmith.workload import Workload
from torchsmith.workloads._batches import STREAM_DATA, ShuffledBatches, generator
from torchsmith.workloads.cnn_pipeline import image_store, store_stats, train_pipeline

__all__ = ["BasicBlock", "ResNetMini", "Scenes", "draw_scenes", "make_images", "render", "workload"]

NUM_CLASSES = 10
IMAGE_SIZE = 32
"""The training resolution: what the network sees."""
SOURCE_SIZE = 176
"""The stored resolution: training crops and resizes down from it."""
NOISE = 0.12
"""Pixel noise: standard deviation of a uniform noise, as a fraction of the 0..255 range."""
CHUNK_PIXELS = 1 << 20
"""Images are rendered this many pixels at a time: float temporaries stay ~12 MiB."""


@dataclass(frozen=True)
class Scenes:
    """What each of ``n`` images shows: its label and nuisance parameters, drawn up front.

    Rendering any subset, in any chunks, at any size, gives the same images as rendering all
    of them: each image's pixel noise comes from its own RNG, seeded by ``(noise_seed, index)``.
    """

    labels: torch.Tensor  # (n,) int64
    shift: torch.Tensor  # (n, 2) object centre offset (x, y), in half-widths
    theta: torch.Tensor  # (n,) rotation jitter, radians
    scale: torch.Tensor  # (n,) object size and grating period jitter
    phase: torch.Tensor  # (n,) grating phase
    fg: torch.Tensor  # (n, 3) foreground colour in [0, 1)
    bg: torch.Tensor  # (n, 3) background colour in [0, 1)
    noise_seed: int

    def __len__(self) -> int:
        return len(self.labels)

    def digest(self, idx: torch.Tensor) -> str:
        """SHA-256 of the scene parameters of images ``idx``: what determines their pixels."""
        h = hashlib.sha256(f"scenes-v1 {self.noise_seed}".encode())
        h.update(idx.to(torch.int64).numpy().tobytes())
        for t in (self.labels, self.shift, self.theta, self.scale, self.phase, self.fg, self.bg):
            h.update(np.ascontiguousarray(t[idx].numpy()).tobytes())
        return h.hexdigest()


def draw_scenes(n: int, g: torch.Generator) -> Scenes:
    """``n`` scenes, balanced over the 10 classes, in random order."""
    labels = torch.arange(n) % NUM_CLASSES
    labels = labels[torch.randperm(n, generator=g)]
    u = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731 - uniform [0, 1)
    # All drawn up front so the stream of draws has a fixed order.
    shift = (u(n, 2) - 0.5) * 0.6  # up to +-0.3 of the half-width
    theta = (u(n) - 0.5) * math.radians(30)  # rotation jitter, +-15 degrees
    scale = 0.7 + 0.6 * u(n)
    phase = u(n) * 2 * math.pi
    # Foreground and background colours differ by at least 0.3 per channel (mod 1), so shapes stay visible.
    fg = u(n, 3)
    bg = (fg + 0.3 + 0.4 * u(n, 3)) % 1.0
    noise_seed = int(torch.randint(0, 2**62, (1,), generator=g))
    return Scenes(labels, shift, theta, scale, phase, fg, bg, noise_seed)


def _pattern(c: int, s: Scenes, i: torch.Tensor, lin: torch.Tensor) -> torch.Tensor:
    """Class ``c``'s intensity map in [0, 1] for the images ``i``: (len(i), H, W).

    Coordinates are affine in the pixel position, so each is built from a column term (m, 1, W)
    plus a row term (m, H, 1): one full-size operation per coordinate.
    """
    col = lambda a: a[:, None, :]  # noqa: E731 - varies along W (x)
    row = lambda a: a[:, :, None]  # noqa: E731 - varies along H (y)
    p = lambda t: t[i][:, None]  # noqa: E731 - (m, 1): one parameter per image
    x0, y0 = lin - p(s.shift[:, 0]), lin - p(s.shift[:, 1])  # (m, W), (m, H): centred, unrotated
    th, ph, sc = p(s.theta), p(s.phase)[:, :, None], p(s.scale)[:, :, None]
    f = 3.0 * math.pi / sc  # 2.3-4.3 grating periods across the image
    size, bar = 0.55 * sc, 0.16 * sc  # object radius, stroke half-width
    edge = 2.0 / len(lin)  # anti-aliased edges about one pixel wide at any size

    def soft(d: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid_(d.mul_(1 / edge))  # ~1 where the signed distance d > 0

    def rotated(a: float = 0.0) -> torch.Tensor:
        """Coordinate along the direction a (radians) in the rotated frame: x for 0, y for pi/2."""
        return col(torch.cos(th - a) * x0) + row(torch.sin(a - th) * y0)

    r = lambda: torch.hypot(col(x0), row(y0))  # noqa: E731 - rotation-invariant
    if c < 3:  # gratings at 0, 45, 90 degrees
        return torch.sin_(rotated(math.radians(45 * c)).mul_(f).add_(ph)).mul_(0.5).add_(0.5)
    if c == 3:  # radial grating: concentric circles
        return torch.sin_(r().mul_(f).add_(ph)).mul_(0.5).add_(0.5)
    if c == 4:  # disc
        return soft(size - r())
    if c == 5:  # ring
        return soft(0.5 * bar - (r() - 0.7 * size).abs_())
    x, y = rotated(0.0), rotated(math.pi / 2)
    if c == 6:  # square
        return soft(0.85 * size - torch.maximum(x.abs_(), y.abs_()))
    if c == 7:  # plus sign, clipped to the object radius
        return soft(torch.minimum(torch.maximum(bar - x.abs_(), bar - y.abs_()), size - r()))
    if c == 8:  # checkerboard
        return torch.sign(torch.sin_(x.mul_(f).add_(ph)).mul_(torch.sin_(y.mul_(f).add_(ph)))).add_(1).mul_(0.5)
    # c == 9: X, the plus sign's arms along the diagonals
    d1, d2 = (x - y).abs_().mul_(math.sqrt(0.5)), (x + y).abs_().mul_(math.sqrt(0.5))
    return soft(torch.minimum(torch.maximum(bar - d1, bar - d2), size - r()))


def _noise(s: Scenes, i: torch.Tensor, size: int) -> torch.Tensor:
    """Uniform bytes for the images ``i``, each from its own RNG: (m, 3, size, size) uint8."""
    return torch.from_numpy(np.stack([
        np.random.default_rng((s.noise_seed, int(j))).integers(0, 256, (3, size, size), dtype=np.uint8)
        for j in i.tolist()
    ]))


def render(s: Scenes, idx: torch.Tensor, size: int) -> torch.Tensor:
    """The images ``idx`` of ``s`` at ``size`` x ``size``: (len(idx), 3, size, size) uint8.

    Vectorised over the images of each class in ``idx``; pass about ``CHUNK_PIXELS`` pixels at
    a time (:func:`chunks`) to bound the float temporaries.
    """
    lin = torch.linspace(-1.0, 1.0, size)  # pixel positions, edge to edge
    half = NOISE * 255 * math.sqrt(3)  # uniform on [-half, half] has std NOISE * 255
    out = torch.empty(len(idx), 3, size, size, dtype=torch.uint8)
    labels = s.labels[idx]
    for c in range(NUM_CLASSES):
        sel = (labels == c).nonzero().squeeze(1)
        if len(sel) == 0:
            continue
        i = idx[sel]
        mask = _pattern(c, s, i, lin)[:, None]  # (m, 1, H, W)
        # bg + (fg - bg) * mask + noise, in 0..255 units; +0.5 then truncation rounds to nearest.
        low = (s.bg[i] * 255 - half + 0.5)[:, :, None, None]  # (m, 3, 1, 1)
        img = torch.addcmul(low, ((s.fg[i] - s.bg[i]) * 255)[:, :, None, None], mask)  # (m, 3, H, W)
        img.add_(_noise(s, i, size), alpha=2 * half / 255)  # 256 levels spanning [-half, half]
        out[sel] = img.clamp_(0.5, 255.5).to(torch.uint8)
    return out


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, then restore the count.

    Rendering is many small operations: one thread is about as fast as two, and stays fast when
    other processes hold the cores, where waiting for a descheduled second thread costs many times more.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def chunks(idx: torch.Tensor, size: int) -> Iterator[torch.Tensor]:
    """``idx`` in runs of about ``CHUNK_PIXELS`` pixels at ``size`` x ``size``."""
    step = max(1, CHUNK_PIXELS // (size * size))
    yield from idx.split(step)


def make_images(n: int, g: torch.Generator, size: int = IMAGE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images ``(n, 3, size, size)`` uint8 and labels ``(n,)`` int64, balanced over 10 classes."""
    s = draw_scenes(n, g)
    with one_thread():
        parts = [render(s, c, size) for c in chunks(torch.arange(n), size)]
    images = torch.cat(parts) if parts else torch.empty(0, 3, size, size, dtype=torch.uint8)
    return images, s.labels


def downscale(images: torch.Tensor, size: int) -> torch.Tensor:
    """(n, 3, H, W) uint8 -> (n, 3, size, size) uint8, bilinear with antialiasing (PIL's BILINEAR resize)."""
    x = F.interpolate(images.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.round_().clamp_(0, 255).to(torch.uint8)


class Normalize:
    """uint8 images -> float32, per-channel standardised. A picklable collate for :class:`ShuffledBatches`."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean = mean.view(1, 3, 1, 1)  # in 0..255 units
        self.std = std.view(1, 3, 1, 1)

    def __call__(self, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
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
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))  # (B, c_out, H/s, W/s)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetMini(nn.Module):
    """Stem conv, stages of :class:`BasicBlock` in ``self.blocks``, global average pool, linear ``head``.

    ``stem_stride=2`` halves H and W in the stem, as ImageNet ResNets downsample in theirs:
    a quarter of the convolution work, for inputs whose detail is coarser than a pixel.
    """

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64), blocks_per_stage: int = 2, num_classes: int = 10,
                 stem_stride: int = 1):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, stride=stem_stride, padding=1, bias=False), nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        blocks, c_in = [], widths[0]
        for i, c_out in enumerate(widths):
            for j in range(blocks_per_stage):
                # Each stage after the first halves H and W in its first block: 32 -> 16 -> 8 (stem stride 1).
                blocks.append(BasicBlock(c_in, c_out, stride=2 if (i > 0 and j == 0) else 1))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))  # (B, 3, 32, 32) -> (B, C, 32 / (s * 2^(stages-1)), ...)
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
    source_size: int = SOURCE_SIZE,
    widths: tuple[int, ...] = (16, 32, 64),
    blocks_per_stage: int = 1,
    stem_stride: int = 2,
    lr: float = 0.02,
) -> Workload:
    """The built-in image classification workload (SGD with Nesterov momentum).

    The ResNet has one block per stage and a stride-2 stem (~78k parameters), so a step costs
    about half of what decoding its batch does (see :mod:`~torchsmith.workloads.cnn_pipeline`).
    ``lr`` 0.02: at 0.05 the first steps are chaotic enough that 1 vs 2 intra-op threads (a
    different summation order, the same mathematics) moved the parameters 17% apart within 14
    steps, past the tuner's numerical guard; at 0.02, 1.5%.

    The training images are rendered and JPEG-encoded once, on first use, and cached (see
    :func:`~torchsmith.workloads.cnn_pipeline.image_store`); later builds render only the
    validation images.

    >>> w = workload(seed=0, train_images=640, val_images=128)
    >>> w.name, len(w.iter_batches())
    ('cnn-mini', 10)
    """
    g = generator(seed, STREAM_DATA)
    scenes = draw_scenes(train_images + val_images, g)
    train_idx = torch.arange(train_images)
    val_idx = torch.arange(train_images, train_images + val_images)
    # The store's key: every training scene, plus one rendered image of each class (so that a
    # change to the renderer changes the key), at the stored size.
    probe = torch.cat([(scenes.labels[train_idx] == c).nonzero()[:1, 0] for c in range(NUM_CLASSES)])
    key = hashlib.sha256(f"cnn-mini {source_size} {scenes.digest(train_idx)}".encode())
    with one_thread():
        key.update(render(scenes, probe, source_size).numpy().tobytes())
        store = image_store(key.hexdigest(),
                            lambda: (render(scenes, c, source_size) for c in chunks(train_idx, source_size)))
        # Validation: the same kind of source images, resized whole to the training resolution,
        # normalised with the training set's statistics (recorded in the store).
        val_x = torch.cat([downscale(render(scenes, c, source_size), IMAGE_SIZE) for c in chunks(val_idx, source_size)]
                          ) if val_images else torch.empty(0, 3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
    # Training batches come from the realistic input pipeline (JPEG files decoded, cropped,
    # resized and flipped per sample, num_workers=0 as written); plan.loader rebuilds it via `loader`.
    pipeline = train_pipeline(store, scenes.labels[train_idx], batch_size=batch_size, seed=seed, size=IMAGE_SIZE)
    norm = Normalize(*store_stats(store))

    return Workload(
        name="cnn-mini",
        seed=seed,
        model=lambda: ResNetMini(widths=tuple(widths), blocks_per_stage=blocks_per_stage, stem_stride=stem_stride),
        batches=pipeline(None),
        loader=pipeline,
        eval_batches=ShuffledBatches(
            (val_x, scenes.labels[val_idx]), batch_size=batch_size, seed=seed, shuffle=False, drop_last=False,
            collate=norm
        ),
        loss=cnn_loss,
        optimizer=lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4),
        samples_per_batch=batch_size,
        extras={"num_classes": NUM_CLASSES, "train_images": train_images, "val_images": val_images,
                "source_size": source_size},
    )
