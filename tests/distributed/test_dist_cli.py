"""`torchsmith launch -- debug desync` end to end: the CLI builds torchrun, workers run the CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from dist_helpers import REPO

from hang_dump import finish_or_dump

pytestmark = [pytest.mark.multiprocess]


@pytest.mark.slow
def test_launch_runs_debug_desync_on_two_workers_and_prints_the_command():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torchsmith", "launch", "--nproc-per-node", "2", "--",
           "debug", "desync", "mlp", "--steps", "2", "--device", "cpu"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out, _ = finish_or_dump(proc, timeout=240)
    assert proc.returncode == 0, out[-4000:]
    assert "running:" in out and "-m torch.distributed.run" in out and "torchsmith.cli.worker debug desync mlp" in out
    assert "in sync: 8 tensors bit-identical on 2 ranks" in out  # 4 weights + 4 biases of mlp
