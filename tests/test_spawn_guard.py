"""tests/spawn_guard.py: an unmarked test that starts a process or calls torch.compile fails, naming
the markers to add (multiprocess too for two children at once); a marked one, and one that starts
nothing, pass."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from spawn_guard import pytest_configure, pytest_runtest_protocol, pytest_runtest_teardown
"""

CASES = """
import subprocess, sys
import pytest
import torch

def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_unmarked_compile():
    torch.compile(torch.nn.Linear(2, 2))

def test_two_at_once_unmarked():
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"]) for _ in range(2)]
    assert [p.wait() for p in procs] == [0, 0]

@pytest.mark.slow
def test_marked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_starts_nothing():
    assert sum(range(4)) == 6
"""


@pytest.mark.slow
def test_guard_fails_unmarked_spawns_and_compiles_and_passes_the_rest(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    multiprocess: several processes\n")
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, errors=3)
    result.stdout.fnmatch_lines_random([
        "*test_unmarked_subprocess started 1 process(es) and made 0 torch.compile call(s) but is not marked slow:*",
        "*test_unmarked_compile started 0 process(es) and made 1 torch.compile call(s) but is not marked slow:*",
        "*test_two_at_once_unmarked started 2 process(es) * but is not marked slow and multiprocess:*",
        "*Tip: add @pytest.mark.slow to the test*",
        "*Tip: add @pytest.mark.slow and @pytest.mark.multiprocess to the test*",
    ])
    for passed in ("test_marked_subprocess", "test_starts_nothing"):
        assert f"ERROR test_cases.py::{passed}" not in result.stdout.str()
