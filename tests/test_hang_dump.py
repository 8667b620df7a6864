"""hang_dump.finish_or_dump: a hung job fails the test with each process's stack, and nothing outlives it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hang_dump import finish_or_dump

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

# A parent that waits on a grandchild in a session of its own, as torchrun waits on its workers.
TREE = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time\\ndef stuck_in_the_worker():\\n    time.sleep(60)\\n"
                          "print('worker up', flush=True)\\nstuck_in_the_worker()"], start_new_session=True)
def waiting_for_the_worker():
    child.wait()
print(child.pid, flush=True)
waiting_for_the_worker()
"""


def test_a_hang_fails_with_every_processs_stack_and_leaves_no_process_behind():
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    worker = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "worker up"  # both stacks are where the test expects them
    with pytest.raises(AssertionError) as failed:
        finish_or_dump(proc, timeout=1)
    said = str(failed.value)
    assert "did not finish in 1 s" in said and f"pid {worker} depth 1" in said, said
    assert "stuck_in_the_worker" in said and "waiting_for_the_worker" in said, said
    time.sleep(0.5)
    assert proc.poll() is not None
    assert not os.path.exists(f"/proc/{worker}") or "Z" in open(f"/proc/{worker}/stat").read().split(")")[1][:3]
