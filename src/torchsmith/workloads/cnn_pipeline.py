"""cnn-mini's input pipeline, written the way users write one: JPEG files decoded per sample.

The training images sit in a packed store as JPEG files (quality 90) of 176x176, 5.5 times
the 32x32 the network trains at, as a photo dataset's images are larger than the network's
input. ``__getitem__`` does what a torchvision ImageNet pipeline does: decode one JPEG with
PIL, take a ``RandomResizedCrop`` (a random box of 25-100% of the area, aspect ratio
3/4-4/3, resized to 32x32 with PIL's bilinear filter), flip it horizontally with probability
1/2, then normalise it into a CHW float tensor. The DataLoader as written uses
``num_workers=0``, so all of that runs on the training process, in series with the step.

That makes cnn-mini data-bound, as image pipelines often are: on a small CPU the data wait
is most of the step as written, longer than the small network's forward, backward and
optimizer step. This is the case ``doctor`` flags and ``plan.loader`` fixes, by decoding in
worker processes while the step runs (``benchmarks/tune_data_bound.py`` measures the data wait
and the gain of two workers and one trainer thread).

Unlike most user pipelines it is exact: each sample's augmentation draws from its own RNG
seeded by ``(seed, epoch, index)``, so the batches are identical with any number of workers,
persistent or not, and after a resume.

Example::

    store = image_store(key, lambda: chunks_of_uint8_images)   # built once, cached
    factory = train_pipeline(store, labels, batch_size=64, seed=0)
    loader = factory(LoaderConfig(num_workers=2))
    x, y = next(iter(loader))        # (64, 3, 32, 32) float32, (64,) int64
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from torchsmith.data.loader import Loader, LoaderArgs, make_loader
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.store import StoreError, StoreWriter, read_index
from torchsmith.data.upgrade import upgrade_store
from torchsmith.plan import LoaderConfig

STREAM_AUGMENT = 13
QUALITY = 90
"""JPEG quality of the stored images (PIL's default chroma subsampling at this quality: 4:2:0)."""
SCALE = (0.25, 1.0)
"""RandomResizedCrop's range of crop areas, as fractions of the image. torchvision's default
starts at 0.08; the objects here fill the middle of the frame, and a crop of under a quarter
of it often misses them."""
RATIO = (3 / 4, 4 / 3)
"""RandomResizedCrop's range of aspect ratios (torchvision's default)."""


def cache_dir() -> Path:
    """Where built-in workloads keep generated stores: ``$TORCHSMITH_CACHE_DIR`` or ``~/.cache/torchsmith``."""
    return Path(os.environ.get("TORCHSMITH_CACHE_DIR") or Path.home() / ".cache" / "torchsmith")


def encode(image: np.ndarray, quality: int = QUALITY) -> bytes:
    """One (3, H, W) uint8 image -> the bytes of a JPEG file."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image.transpose(1, 2, 0))).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def decode(data: np.ndarray | bytes) -> Image.Image:
    """The bytes of an image file -> a decoded RGB PIL image (torchvision's ``pil_loader``)."""
    with Image.open(io.BytesIO(data)) as img:  # type: ignore[arg-type]  # numpy types ndarray.__buffer__ only on 3.12+
        return img.convert("RGB")


def image_store(key: str, images: Callable[[], Iterable[torch.Tensor | np.ndarray]], *,
                quality: int = QUALITY) -> Path:
    """The packed store of JPEG-encoded images, built once and cached under :func:`cache_dir`.

    ``images()`` yields chunks ``(m, 3, H, W)`` uint8 and is called only when the store is not
    cached yet. ``key`` names the content: a hash of everything that determines the pixels (the
    caller's job: cnn-mini hashes every image's scene parameters and a rendered sample, so a
    change to the renderer changes the key too). The index's ``meta`` records the codec, the
    image shape (H, W, C) and the per-channel mean and standard deviation of every stored pixel
    (0..255 units), the normalisation statistics of the dataset.

    Built in a temporary directory and renamed into place, so concurrent builders and
    interrupted builds never leave a half store under the final name.
    """
    digest = hashlib.sha256(f"{key} jpeg q{quality}".encode()).hexdigest()[:20]
    final = cache_dir() / f"images-jpeg-{digest}"
    try:
        if read_index(final).block_bytes is None:  # cached by torchsmith 0.1.0 (format 1): re-indexed, once
            upgrade_store(final)
        return final
    except StoreError:
        pass
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        counts = np.zeros((3, 256), dtype=np.int64)  # per-channel histogram of every stored pixel
        shape = None
        encoded: list[Future[bytes]] = []
        with StoreWriter(tmp, dtype=np.uint8, shape=None, overwrite=True) as w, \
                ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
            # PIL encodes without the GIL: chunk k is encoded while chunk k + 1 is produced.
            for chunk in images():
                array = np.asarray(chunk)  # (m, 3, H, W) uint8
                shape = [*array.shape[2:], array.shape[1]]
                x = torch.from_numpy(array)
                counts += np.stack([torch.bincount(x[:, c].reshape(-1), minlength=256).numpy() for c in range(3)])
                for future in encoded:
                    w.add(np.frombuffer(future.result(), dtype=np.uint8))
                encoded = [pool.submit(encode, image, quality) for image in array]
            for future in encoded:
                w.add(np.frombuffer(future.result(), dtype=np.uint8))
            levels = np.arange(256)
            pixels = np.maximum(counts.sum(axis=1), 1)
            mean = counts @ levels / pixels
            std = np.sqrt(counts @ levels ** 2 / pixels - mean ** 2)
            w.meta.update(codec="jpeg", quality=quality, shape=shape, mean=mean.tolist(), std=std.tolist())
        shutil.rmtree(final, ignore_errors=True)  # a stale, invalid one
        os.rename(tmp, final)
    except OSError:
        if not (final / "index.json").is_file():  # lost a race to a concurrent builder: theirs is fine
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def store_stats(store: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and standard deviation (3,) float32 recorded in the store, 0..255 units."""
    meta = read_index(store).meta
    return torch.tensor(meta["mean"], dtype=torch.float32), torch.tensor(meta["std"], dtype=torch.float32)


def resized_crop_box(rng: np.random.Generator, width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params``, drawing from ``rng``: (left, top, right, bottom)."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, left + w, top + h
    # Fallback, as torchvision's: the whole image, cropped to the nearest allowed aspect ratio.
    in_ratio = width / height
    w, h = width, height
    if in_ratio < RATIO[0]:
        h = round(w / RATIO[0])
    elif in_ratio > RATIO[1]:
        w = round(h * RATIO[1])
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


class DecodedImages(Dataset):
    """Map-style dataset: key ``(epoch, index)`` (or ``index``) -> (image (3, size, size) float32, label).

    With ``augment=False`` the whole image is resized to ``size`` (no crop, no flip).
    """

    def __init__(self, store: str | Path, labels: torch.Tensor, mean: np.ndarray, std: np.ndarray, *,
                 seed: int, size: int = 32, augment: bool = True) -> None:
        self.images = MmapDataset(store)
        self.labels = labels.tolist()
        self.mean = np.asarray(mean, np.float32).reshape(1, 1, -1)  # (1, 1, C), 0..255 units
        self.inv_std = 1.0 / np.asarray(std, np.float32).reshape(1, 1, -1)
        self.seed = seed
        self.size = size
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, i = key if isinstance(key, tuple) else (0, key)
        img = decode(self.images[i].numpy())  # the JPEG file's bytes -> (H, W) RGB
        box = (0, 0, *img.size)
        if self.augment:
            rng = np.random.default_rng((self.seed, STREAM_AUGMENT, epoch, i))
            box = resized_crop_box(rng, *img.size)
        img = img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        if self.augment and rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        x = (np.asarray(img, dtype=np.float32) - self.mean) * self.inv_std  # (H, W, C)
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))), self.labels[i]  # (C, H, W)


class TrainPipeline:
    """The loader factory: ``pipeline(cfg) -> Loader``; ``None`` fields of ``cfg`` stay as written."""

    written = LoaderArgs(num_workers=0)

    def __init__(self, dataset: DecodedImages, *, batch_size: int, seed: int) -> None:
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed

    def __call__(self, cfg: LoaderConfig | None = None) -> Loader:
        return make_loader(self.dataset, cfg, batch_size=self.batch_size, seed=self.seed, written=self.written,
                           with_epoch=True)


def train_pipeline(store: str | Path, labels: torch.Tensor, *, batch_size: int, seed: int,
                   size: int = 32) -> TrainPipeline:
    """The augmenting loader factory over a store built by :func:`image_store`, normalised with its statistics."""
    mean, std = store_stats(store)
    ds = DecodedImages(store, labels, mean.numpy(), std.numpy(), seed=seed, size=size)
    return TrainPipeline(ds, batch_size=batch_size, seed=seed)
