"""`run --plan -- cmd` x SIGINT and SIGTERM: the signal sent to torchsmith alone (as `kill` and
Kubernetes send it) reaches the script, the script dies too, and its exit code is passed through.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest
from fault_procs import finish, start, wait_for

pytestmark = [pytest.mark.slow]

SCRIPT = """
import os, signal, sys, time
if sys.argv[2] == "trap":  # a script with its own SIGTERM handling: exits 7
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
open(sys.argv[1], "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(("signum", "mode", "expected"), [
    (signal.SIGTERM, "plain", 128 + signal.SIGTERM),  # killed by the signal: 143, as a shell reports it
    (signal.SIGINT, "plain", 128 + signal.SIGINT),    # KeyboardInterrupt: Python dies by SIGINT, 130
    (signal.SIGTERM, "trap", 7),                      # the script's own exit code, passed through
])
def test_run_plan_cmd_x_signal_reaches_the_script_and_its_exit_code_is_passed_through(tmp_path, signum, mode,
                                                                                       expected):
    (tmp_path / "train.py").write_text(SCRIPT)
    pid_file = tmp_path / "pid"
    proc = start(["run", "--", sys.executable, "train.py", pid_file, mode], tmp_path)
    wait_for(lambda: pid_file.exists() and pid_file.read_text() != "" or proc.poll() is not None, what="the script")
    child = int(pid_file.read_text())
    proc.send_signal(signum)  # to torchsmith only: the script is not signalled by the test
    code, _, err = finish(proc, timeout=60)
    assert code == expected, err[-3000:]
    wait_for(lambda: not alive(child), timeout=10, what="the script to exit")
