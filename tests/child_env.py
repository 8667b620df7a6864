"""The environment a test gives the processes it starts, when the thread count is what it tests.

Under several pytest-xdist workers, tests/conftest.py sets OMP_NUM_THREADS=1 for every process a
test starts (the workers would otherwise oversubscribe the cores). A test of the thread count as
written (the threads knob's candidates, doctor's "CPU cores left idle") starts its processes with
:func:`default_threads_env` instead: PyTorch's default there, as a user's shell gives it.
"""

import os


def default_threads_env() -> dict[str, str]:
    """This process's environment without a thread count: a child starts with PyTorch's default."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
