"""What every command shares: the shell exit code of a child, and options declared once."""

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from torchsmith.cli.common import shell_exit_code

CLI = Path(__file__).resolve().parents[2] / "src" / "torchsmith" / "cli"


def test_a_signal_death_reads_as_128_plus_n_as_in_a_shell():
    assert shell_exit_code(0) == 0 and shell_exit_code(3) == 3
    assert shell_exit_code(-signal.SIGKILL) == 128 + 9 and shell_exit_code(-signal.SIGTERM) == 143


@pytest.mark.slow
def test_a_real_child_killed_by_a_signal():
    code = subprocess.call([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert code == -signal.SIGTERM and shell_exit_code(code) == 143


def test_device_and_json_are_declared_once_in_common():
    for flag in ("--device", "--json"):
        found = {p.name: len(re.findall(rf'"{flag}"', p.read_text())) for p in CLI.glob("*.py")}
        assert {name: n for name, n in found.items() if n} == {"common.py": 1}, (flag, found)
