"""`torchsmith verify PLAN -- python script.py`, as a user types it: exit codes, one JSON object on stdout,
messages on stderr (`tune --json -- python script.py`: tests/tuner/test_tune_script_cli.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchsmith.plan import OptimizerImpl, Plan

SCRIPT = Path(__file__).parents[1] / "scripts" / "plain_loop.py"
SRC = Path(__file__).parent.parent.parent / "src"


def _torchsmith(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "torchsmith", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=1200)


@pytest.mark.slow
def test_verify_a_script_prints_its_interval_as_json_and_exits_0_or_1(tmp_path):
    plan = Plan(optimizer=OptimizerImpl(impl="foreach")).save(tmp_path / "plan.json")
    # --pairs 3: exactly the 3 pairs asserted below, not up to 12 while the budget lasts.
    proc = _torchsmith("verify", str(plan), "--json", "--budget", "30s", "--window", "3", "--pairs", "3", "--",
                       sys.executable, str(SCRIPT),
                       cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout holds the JSON object alone
    assert out["speedup"]["pairs"] >= 3 and out["speedup"]["confidence"] == 0.95
    assert out["slower"] == (proc.returncode == 1) and out["slower"] == (out["speedup"]["high"] < 1.0)
    assert "pairs of fresh processes" in proc.stderr


@pytest.mark.parametrize(("pairs", "min_pairs", "least", "most"), [
    (None, None, 3, 12), (None, 16, 16, 16), (None, 5, 5, 12), (8, 6, 6, 8), (8, None, 3, 8)])
def test_min_pairs_sets_the_least_and_raises_the_cap_to_it(pairs, min_pairs, least, most):
    from torchsmith.cli.verify_script import with_pairs
    from torchsmith.tuner.script.verify import ScriptVerifyConfig

    cfg = with_pairs(ScriptVerifyConfig(), pairs=pairs, min_pairs=min_pairs)
    assert (cfg.min_pairs, cfg.max_pairs) == (least, most)


def test_min_pairs_above_the_cap_is_refused_with_a_tip():
    from torchsmith.cli.verify_script import with_pairs
    from torchsmith.tuner.script.verify import ScriptVerifyConfig

    with pytest.raises(ValueError, match=r"--min-pairs 9 is more than --pairs 8(.|\n)*Tip"):
        with_pairs(ScriptVerifyConfig(), pairs=8, min_pairs=9)
