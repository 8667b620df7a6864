"""cnn-mini's input pipeline, written the way users write one.

Images sit compressed (zlib, as inside a PNG) in a packed store on disk. ``__getitem__``
decodes one image, pads it by 4 pixels and takes a random 32x32 crop, flips it with
probability 1/2, normalises it and returns a CHW float tensor; the DataLoader as written
uses ``num_workers=0``. Per-sample decoding and augmentation run on the CPU in series with
the step: the data-bound case ``doctor`` flags and ``plan.loader`` fixes.

Unlike most user pipelines it is exact: each sample's augmentation draws from its own RNG
seeded by ``(seed, epoch, index)``, so the batches are identical with any number of workers,
persistent or not, and after a resume.

Example::

    factory = train_pipeline(images, labels, mean, std, batch_size=64, seed=0)
    loader = factory(LoaderConfig(num_workers=2))
    x, y = next(iter(loader))        # (64, 3, 32, 32) float32, (64,) int64
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from torchsmith.data.loader import Loader, LoaderArgs, make_loader
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.store import StoreError, StoreWriter, read_index
from torchsmith.plan import LoaderConfig

STREAM_AUGMENT = 13
PAD = 4


def cache_dir() -> Path:
    """Where built-in workloads keep generated stores: ``$TORCHSMITH_CACHE_DIR`` or ``~/.cache/torchsmith``."""
    return Path(os.environ.get("TORCHSMITH_CACHE_DIR") or Path.home() / ".cache" / "torchsmith")


def encode(image: np.ndarray) -> bytes:
    """One (3, H, W) uint8 image -> zlib-compressed HWC bytes (PNG's row order and codec)."""
    return zlib.compress(np.ascontiguousarray(image.transpose(1, 2, 0)).tobytes(), 6)


def image_store(images: torch.Tensor) -> Path:
    """The packed store of ``images`` (N, 3, H, W) uint8 compressed one by one, built once.

    Keyed by the images' SHA-256; built in a temporary directory and renamed into place, so
    concurrent builders and interrupted builds never leave a half store under the final name.
    """
    array = images.numpy()
    key = hashlib.sha256(array.tobytes()).hexdigest()[:20]
    final = cache_dir() / f"images-zlib-hwc-{key}"
    try:
        read_index(final)
        return final
    except StoreError:
        pass
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        with StoreWriter(tmp, dtype=np.uint8, shape=None, meta={"codec": "zlib-hwc", "shape": [*array.shape[2:], array.shape[1]]},
                         overwrite=True) as w:
            for image in array:
                w.add(np.frombuffer(encode(image), dtype=np.uint8))
        shutil.rmtree(final, ignore_errors=True)  # a stale, invalid one
        os.rename(tmp, final)
    except OSError:
        if not (final / "index.json").is_file():  # lost a race to a concurrent builder: theirs is fine
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


class DecodedImages(Dataset):
    """Map-style dataset: key ``(epoch, index)`` (or ``index``) -> (image (3, H, W) float32, label)."""

    def __init__(self, store: str | Path, labels: torch.Tensor, mean: np.ndarray, std: np.ndarray, *,
                 seed: int, augment: bool = True) -> None:
        self.images = MmapDataset(store)
        self.shape = tuple(self.images.index.meta["shape"])  # (H, W, C) as encoded
        self.labels = labels.tolist()
        self.mean = np.asarray(mean, np.float32).reshape(1, 1, -1)  # (1, 1, C), 0..255 units
        self.inv_std = 1.0 / np.asarray(std, np.float32).reshape(1, 1, -1)
        self.seed = seed
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, i = key if isinstance(key, tuple) else (0, key)
        raw = zlib.decompress(self.images[i].numpy())
        img = np.frombuffer(raw, dtype=np.uint8).reshape(self.shape)  # (H, W, C)
        if self.augment:
            rng = np.random.default_rng((self.seed, STREAM_AUGMENT, epoch, i))
            h, w, _ = self.shape
            padded = np.pad(img, ((PAD, PAD), (PAD, PAD), (0, 0)))  # zero padding, as RandomCrop(padding=4)
            top, left = rng.integers(0, 2 * PAD + 1, size=2)
            img = padded[top:top + h, left:left + w]
            if rng.random() < 0.5:
                img = img[:, ::-1]  # horizontal flip
        x = (img.astype(np.float32) - self.mean) * self.inv_std  # (H, W, C)
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), self.labels[i]  # (C, H, W)


class TrainPipeline:
    """The loader factory: ``pipeline(cfg) -> Loader``; ``None`` fields of ``cfg`` stay as written."""

    written = LoaderArgs(num_workers=0)

    def __init__(self, dataset: DecodedImages, *, batch_size: int, seed: int) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed

    def __call__(self, cfg: LoaderConfig | None = None) -> Loader:
        return make_loader(self.dataset, cfg, batch_size=self.batch_size, seed=self.seed, written=self.written,
                           with_epoch=True)


def train_pipeline(images: torch.Tensor, labels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, *,
                   batch_size: int, seed: int) -> TrainPipeline:
    """Store ``images`` compressed (once, cached) and return the augmenting loader factory."""
    ds = DecodedImages(image_store(images), labels, mean.reshape(-1).numpy(), std.reshape(-1).numpy(), seed=seed)
    return TrainPipeline(ds, batch_size=batch_size, seed=seed)
