"""plan.loader takes effect in the engine, exactly; worker threads; loader tuning; cnn-mini's pipeline; CLI."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset
from typer.testing import CliRunner

from torchsmith.data.loader import LoaderArgs, make_loader
from torchsmith.data.loader_tune import tune_loader
from torchsmith.engine.loop import run
from torchsmith.engine.registry import registered_transforms
from torchsmith.plan import LoaderConfig, Plan
from torchsmith.transforms.base import DeviceInfo, TransformError
from torchsmith.transforms.loader import apply_loader
from torchsmith.workloads import cnn_mini, cnn_pipeline, mlp


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TORCHSMITH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def one_thread():
    # One intra-op thread: on a shared, oversubscribed CI machine two spinning OpenMP threads make
    # this tiny model's steps 10x slower. Every run compared here uses the same count.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_cnn():
    # 4 batches per epoch and a very small ResNet; decoding stays per sample.
    return cnn_mini.workload(0, train_images=128, val_images=32, batch_size=32, widths=(4, 8), blocks_per_stage=1)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=[pytest.mark.slow, pytest.mark.multiprocess])])
def test_plan_loader_is_exact_and_resumes_without_rereading(tmp_path, workers, monkeypatch, one_thread):
    w = tiny_cnn()
    plan = Plan(loader=LoaderConfig(num_workers=workers, persistent_workers=True if workers else None))
    full = run(w, Plan(), steps=7)  # as written: num_workers=0; crosses into epoch 1
    first = run(w, plan, steps=3, checkpoint_dir=tmp_path, checkpoint_every=3)  # mid-epoch 0
    assert first.losses == full.losses[:3]
    assert any(c.startswith("loader: DataLoader num_workers=" + str(workers)) for c in first.changes)

    decoded = []
    real = cnn_pipeline.DecodedImages.__getitem__
    monkeypatch.setattr(cnn_pipeline.DecodedImages, "__getitem__", lambda self, k: decoded.append(k) or real(self, k))
    second = run(w, plan, steps=7, checkpoint_dir=tmp_path, resume=True)
    assert second.start_step == 3 and second.losses == full.losses[3:]  # bit for bit
    if workers == 0:  # the resumed loader starts at batch 3: the 3 batches before are never decoded
        assert len(decoded) == 4 * 32 and decoded[0][0] == 0 and decoded[-1][0] == 1


def test_loader_transform_refuses_without_factory_and_registers_candidates():
    w = mlp.workload(0, train_rows=512, val_rows=64)
    source, change = apply_loader(w, LoaderConfig())
    assert source is None and "as written" in change.summary  # the engine keeps w.iter_batches()
    with pytest.raises(TransformError, match="no loader factory"):
        apply_loader(w, LoaderConfig(num_workers=2))
    info = registered_transforms()["loader"]
    cpu = info.candidates(DeviceInfo(type="cpu", cores=8))
    cuda = info.candidates(DeviceInfo(type="cuda", cores=8))
    assert {c.num_workers for c in cpu} == {1, 4, 8} and all(c.pin_memory is None for c in cpu)
    assert {c.num_workers for c in info.candidates(DeviceInfo(type="cpu", cores=2))} == {1, 2}
    assert any(c.pin_memory for c in cuda) and LoaderConfig() not in cpu


def test_args_resolve_over_as_written():
    written = LoaderArgs(num_workers=3, prefetch_factor=4)
    a = written.resolve(LoaderConfig(num_workers=0, batch_fetch=True))
    assert (a.num_workers, a.prefetch_factor, a.batch_fetch) == (0, 4, True)
    e = LoaderArgs(num_workers=0, persistent_workers=True, prefetch_factor=8).effective()
    assert (e.persistent_workers, e.prefetch_factor) == (False, 2)  # worker-only options drop with 0 workers
    assert written.resolve(None) == written and written.resolve(LoaderConfig()) == written


class Threads(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.get_num_threads()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_workers_run_one_thread_unless_told_otherwise():
    one = make_loader(Threads(), LoaderConfig(num_workers=1), batch_size=2, shuffle=False)
    assert [int(v) for b in one for v in b] == [1, 1, 1, 1]
    two = make_loader(Threads(), LoaderConfig(num_workers=1), batch_size=2, written=LoaderArgs(worker_threads=2))
    assert [int(v) for b in two for v in b] == [2, 2, 2, 2]


class Sleepy(Dataset):
    """Each sample waits 4 ms, as on a slow disk: workers overlap the waits even on a busy machine."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.tensor(i)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tuner_finds_workers_for_io_bound_loading():
    ds = Sleepy()
    result = tune_loader(lambda cfg: make_loader(ds, cfg, batch_size=8), samples_per_batch=8, batches=4, passes=1,
                         rounds=1, try_batch_fetch=False, worker_counts=[0, 2])
    assert result.baseline.args.num_workers == 0
    assert result.best.args.num_workers == 2 and result.speedup > 1.3, \
        [(t.args, t.samples_per_s) for t in result.trials]
    assert Plan(loader=result.recommended).loader.num_workers == 2


def test_cnn_pipeline_decodes_and_augments_deterministically():
    w = tiny_cnn()
    ds = w.loader.dataset
    assert w.loader.written.num_workers == 0 and w.batches.args.num_workers == 0  # as written
    x = ds[(0, 5)]
    assert x[0].shape == (3, 32, 32) and x[0].dtype == torch.float32 and isinstance(x[1], int)
    assert torch.equal(ds[(0, 5)][0], x[0])  # same (seed, epoch, index): same crop and flip
    views = [ds[(e, 5)][0] for e in range(8)]
    assert len({v.sum().item() for v in views}) > 3  # other epochs: other crops and flips
    plain = cnn_pipeline.DecodedImages(ds.images.path, torch.tensor(ds.labels), ds.mean, 1 / ds.inv_std, seed=0,
                                       augment=False)[5][0]
    # The un-augmented decode is the whole source image resized to 32x32, as the validation
    # images are: the rendered image, up to JPEG's loss.
    size = w.extras["source_size"]
    images, labels = cnn_mini.make_images(128 + 32, cnn_mini.generator(0, cnn_mini.STREAM_DATA), size=size)
    assert labels[:128].tolist() == ds.labels
    mean, inv = ds.mean.reshape(3, 1, 1), ds.inv_std.reshape(3, 1, 1)
    expected = torch.from_numpy((cnn_mini.downscale(images[5:6], 32)[0].numpy() - mean) * inv)
    assert (plain - expected).abs().mean() < 3 * float(inv.mean())  # under 3 levels of 255 on average


def test_cnn_store_holds_jpeg_files_of_the_source_size():
    ds = tiny_cnn().loader.dataset
    meta = ds.images.index.meta
    size = meta["shape"][0]
    assert meta["codec"] == "jpeg" and meta["shape"] == [size, size, 3] and size > 32
    blob = ds.images[7].numpy().tobytes()
    assert blob[:3] == b"\xff\xd8\xff" and blob[-2:] == b"\xff\xd9"  # JPEG SOI ... EOI markers
    with Image.open(io.BytesIO(blob)) as img:
        assert img.format == "JPEG" and img.mode == "RGB" and img.size == (size, size)
        img.load()
    assert len(meta["mean"]) == len(meta["std"]) == 3 and all(20 < s < 128 for s in meta["std"])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cnn_batches_are_identical_with_workers():
    w = tiny_cnn()
    as_written = w.loader(None)
    workers = w.loader(LoaderConfig(num_workers=2))
    for epoch in (0, 1):
        as_written.set_epoch(epoch)
        workers.set_epoch(epoch)
        pairs = list(zip(as_written, workers, strict=True))
        assert len(pairs) == 4
        for (x0, y0), (x2, y2) in pairs:
            assert torch.equal(x0, x2) and torch.equal(y0, y2)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cli_pack_verify_tune(tmp_path):
    from torchsmith.cli import app

    runner = CliRunner()
    np.save(tmp_path / "a.npy", np.arange(4000, dtype=np.int32).reshape(500, 8))
    r = runner.invoke(app, ["data", "pack", str(tmp_path / "a.npy"), str(tmp_path / "s"), "--shard-mb", "0.004"])
    assert r.exit_code == 0 and "packed 500 samples" in r.output, r.output
    assert runner.invoke(app, ["data", "verify", str(tmp_path / "s")]).exit_code == 0
    quick = ["--batches", "3", "--passes", "1", "--rounds", "1"]
    r = runner.invoke(app, ["data", "tune", str(tmp_path / "s"), "--batch-size", "32",
                            "--out", str(tmp_path / "p.json"),
                            *quick, "--json"])
    assert r.exit_code == 0, r.output
    # Which arguments win is the measurement's call (on 500 tiny samples, often the loader as
    # written); the plan written must be the one recommended.
    assert Plan.load(tmp_path / "p.json").loader == LoaderConfig(**json.loads(r.output)["recommended"])
    r = runner.invoke(app, ["data", "tune", str(tmp_path / "s"), "--batch-size", "32", "--no-write", *quick])
    assert r.exit_code == 0 and "recommended" in r.output, r.output
    r = runner.invoke(app, ["data", "tune", str(tmp_path / "s")])
    assert r.exit_code == 2 and "--batch-size" in r.output
    (tmp_path / "s" / "shard_00001.npy").write_bytes(b"\x93NUMPY")
    r = runner.invoke(app, ["data", "verify", str(tmp_path / "s")])
    assert r.exit_code == 1 and "shard_00001.npy is truncated" in r.output.replace("\n", "")
