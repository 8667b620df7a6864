import os
import signal
import sys
from pathlib import Path

# Tests share small helper modules (toy workloads) by plain import.
for sub in ("engine",):
    sys.path.insert(0, str(Path(__file__).parent / sub))

# Keep the peak-FLOP/s cache and other state out of the user's home during tests.
os.environ.setdefault("TORCHSMITH_CACHE_DIR", str(Path(__file__).parent.parent / ".pytest_cache" / "torchsmith"))

# Every process a test starts prints its threads' stacks on SIGABRT, which hang_dump.py sends to a
# child that hangs past its timeout: the failure then says where each process of the job waited.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


import pytest  # noqa: E402
import torch  # noqa: E402

# `make test` runs one pytest-xdist worker per core. With each worker's torch on every core, their
# OpenMP teams spin against each other: an in-process tune test that takes 1.0 s alone took 26 s
# beside the other worker on 2 cores. So several workers run their own torch on one thread each,
# and so do the processes they start (OMP_NUM_THREADS=1, unless the caller set it): a child's
# two-thread team beside the other worker spins the same way (`time make test` shows the suite's
# cost). A test about the thread count as written (the threads knob, doctor's "CPU cores left
# idle") gives its processes the default itself: `child_env.default_threads_env()`.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# A shell starts a background job (`make test &`) with SIGINT ignored, and an ignored signal stays
# ignored across exec: the tests that press Ctrl-C on a child (doctor's partial window, run's exit
# code 130) then wait for a child that never gets it. A Python handler is reset to the default on
# exec, so with this one the children start as a terminal would start them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Fails an unmarked test that starts a process or calls torch.compile (the fast tier stays fast).
from spawn_guard import pytest_configure, pytest_runtest_protocol, pytest_runtest_teardown  # noqa: E402, F401


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `make test` (pytest-xdist's ``--dist loadgroup``), a module's tests that share a
    module-scoped fixture run on one worker. Spread over two workers, each builds the fixture: the
    45 s `tune` of tests/tuner/test_tune_script_cli.py ran twice, once per worker."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures and any(defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))  # the file


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Thread counts are process-wide: a test that sets them (a plan applied in-process, a probe)
    must not change what the next test sees as the count "as written"."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a whole test module (small models on 2 shared cores run steadier)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-rank gloo process group (distributed checkpoints, desync checks) for one test."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
