"""A one-rank gloo group for the distributed-checkpoint fault tests."""

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
