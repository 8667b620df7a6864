"""`torchsmith verify` on a plan that changes nothing: the target as written cannot be slower, so nothing
is measured (an A/A run would fail a CI gate on noise up to 1 time in 20), but the target is still checked."""

import json
import sys

import pytest
from typer.testing import CliRunner

from terminal_text import unwrapped
from torchsmith.cli import app
from torchsmith.plan import OptimizerImpl, Plan


@pytest.mark.parametrize("target", [["mlp"], ["--", "python", "train.py"]])
def test_an_as_written_plan_passes_without_measuring(tmp_path, monkeypatch, target):
    plan = Plan().save(tmp_path / "plan.json")
    (tmp_path / "train.py").write_text("raise SystemExit('never run')\n")
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["verify", str(plan), "--json", *target])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout[out.stdout.index("{"):])
    assert got["as_written"] is True and got["slower"] is False and got["verdict"] == "as written"
    assert got["speedup"] == {"estimate": 1.0, "low": 1.0, "high": 1.0, "confidence": 0.95, "pairs": 0}
    assert "nothing was measured" in got["notes"][0]


@pytest.mark.parametrize(("target", "says"), [
    (["no-such-workload"], "neither a built-in name"),
    (["--", "no-such-program", "train.py"], "cannot run `no-such-program`"),
    (["--", "python", "no_such_train.py", "--lr", "1"], "no such script no_such_train.py"),
    (["--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "no_such_train.py"],
     "no such script no_such_train.py"),
])
def test_an_as_written_plan_still_checks_its_target(tmp_path, target, says):
    plan = Plan().save(tmp_path / "plan.json")
    out = CliRunner().invoke(app, ["verify", str(plan), *target])
    said = unwrapped(out.output)  # rich wraps a long path at the terminal's width
    assert out.exit_code == 2 and says in said and "Tip:" in said, out.output


def test_a_plan_that_changes_something_is_not_short_circuited(tmp_path):
    from torchsmith.cli.verify import says_as_written

    plan = Plan(optimizer=OptimizerImpl(impl="foreach")).save(tmp_path / "plan.json")
    assert says_as_written(plan, ["mlp"], as_json=True) is False


@pytest.mark.parametrize(("command", "flags", "named"), [
    ("verify", ["--pairs", "8"], "--pairs applies"),
    ("verify", ["--min-pairs", "5", "--window", "20"], "--window, --min-pairs apply"),
    ("tune", ["--window", "20"], "--window applies"),
    ("tune", ["--on-spread", "refuse"], "--on-spread applies"),
])
def test_a_script_only_option_given_for_a_workload_is_refused_not_ignored(tmp_path, command, flags, named):
    changes = Plan(optimizer=OptimizerImpl(impl="foreach"))  # not as written: that answer comes before any measuring
    plan = [str(changes.save(tmp_path / "plan.json"))] if command == "verify" else []
    out = CliRunner().invoke(app, [command, *plan, "mlp", *flags])
    assert out.exit_code == 2, out.output
    said = unwrapped(out.output)  # rich wraps long lines at the terminal's width
    assert named in said and "mlp is a workload" in said and "Tip: drop" in said
