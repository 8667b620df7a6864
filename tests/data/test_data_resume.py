"""Resumable position: after a checkpoint at batch k the remaining order equals the uninterrupted one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchsmith.data.loader import make_loader
from torchsmith.data.mmap_dataset import MmapDataset
from torchsmith.data.pack import pack_arrays
from torchsmith.data.sampler import ResumableSampler
from torchsmith.plan import LoaderConfig

N, BATCH = 203, 8  # 25 full batches per epoch, 3 samples dropped


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("resume") / "store"
    pack_arrays(np.arange(N, dtype=np.int64)[:, None], path, shard_bytes=8 * 50)  # sample i holds i
    return MmapDataset(path)


def order(batches) -> list[int]:
    return [int(v) for b in batches for v in b.reshape(-1)]


def loader(ds, workers: int, **kw):
    cfg = LoaderConfig(num_workers=workers, persistent_workers=workers > 0 or None)
    return make_loader(ds, cfg, batch_size=BATCH, seed=7, **kw)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=[pytest.mark.slow, pytest.mark.multiprocess])])
def test_resume_mid_epoch_equals_uninterrupted(ds, workers):
    full = loader(ds, workers)
    full.set_epoch(3)
    epoch3 = order(full)
    full.set_epoch(4)
    epoch4 = order(full)
    full.close()
    last = len(full)
    assert last == N // BATCH and sorted(epoch3) != epoch3 and len(set(epoch3)) == last * BATCH
    assert epoch3 != epoch4  # shuffled anew each epoch

    for k in (0, 1, 10, last - 1, last):
        first = loader(ds, workers)
        first.set_epoch(3)
        it = iter(first)
        taken = [next(it) for _ in range(k)]  # workers prefetch ahead; only k batches are taken
        state = first.state_dict()
        assert state == {"epoch": 3, "batches": k}
        del it
        first.close()

        resumed = loader(ds, workers)
        resumed.load_state_dict(state)
        rest = order(resumed)
        assert order(taken) + rest == epoch3, k
        resumed.set_epoch(4)  # and the next epoch is untouched by the resume
        assert order(resumed) == epoch4
        resumed.close()


def test_batch_fetch_gives_the_same_batches(ds):
    a, b = loader(ds, 0), make_loader(ds, LoaderConfig(batch_fetch=True), batch_size=BATCH, seed=7)
    for epoch in (0, 1):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_rank_shards_are_disjoint_and_cover_the_epoch(world):
    for epoch in (0, 5):
        shards = []
        for rank in range(world):
            s = ResumableSampler(N, seed=1, rank=rank, world_size=world)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(shards[-1]) == len(s)
        flat = [i for sh in shards for i in sh]
        assert len(flat) == len(set(flat)) == N  # disjoint, and together the whole epoch
        assert max(map(len, shards)) - min(map(len, shards)) <= 1
        dropped = [list(ResumableSampler(N, seed=1, rank=r, world_size=world, drop_last=True)) for r in range(world)]
        assert len({len(d) for d in dropped}) == 1 and len({i for d in dropped for i in d}) == N - N % world


def test_rank_resume_and_errors():
    s = ResumableSampler(N, seed=1, rank=1, world_size=3)
    s.set_epoch(2)
    full = list(s)
    s.set_start(10)
    assert list(s) == full[10:]
    assert list(s) == full  # the start applies to one pass only
    s.set_start(4)
    s.set_epoch(3)  # a different epoch drops a pending start
    assert len(list(s)) == len(s)
    with pytest.raises(ValueError, match="rank 3"):
        ResumableSampler(N, rank=3, world_size=3)
    other = ResumableSampler(N + 1, seed=1)
    with pytest.raises(ValueError, match="same dataset and seed"):
        other.load_state_dict(s.state_dict())


def test_order_is_a_pure_function_of_seed_and_epoch():
    torch.manual_seed(0)
    a = ResumableSampler(N, seed=3).epoch_order(1)
    torch.manual_seed(1)  # the global RNG plays no part
    assert torch.equal(a, ResumableSampler(N, seed=3).epoch_order(1))
    assert not torch.equal(a, ResumableSampler(N, seed=4).epoch_order(1))
    assert torch.equal(ResumableSampler(N, shuffle=False).epoch_order(9), torch.arange(N))
