"""A run that ends non-finite fails; tune's guard rejects non-finite candidates with the reason."""

import math

import pytest
import torch
from fault_helpers import cli, tiny, write_workload_file

from torchsmith.engine.checkpoint import list_checkpoints
from torchsmith.engine.loop import RunFailedError, run
from torchsmith.harness.compare import PlanMeasurement, param_distance
from torchsmith.harness.loss_guard import compare_losses
from torchsmith.plan import Plan
from torchsmith.tuner.guard import GuardConfig, guard_rejection

NAN_AFTER = """
import torch, torch.nn.functional as F, sys
sys.path.insert(0, {here!r})
from fault_helpers import tiny
def workload():
    calls = [0]
    def loss(m, b):
        calls[0] += 1
        out = F.mse_loss(m(b[0]), b[1])
        return out * float("nan") if calls[0] > {after} else out
    return tiny(loss=loss)
"""


def _nan_after(after):
    calls = [0]

    def loss(m, b):
        calls[0] += 1
        out = torch.nn.functional.mse_loss(m(b[0]), b[1])
        return out * float("nan") if calls[0] > after else out
    return tiny(loss=loss)


def test_final_nonfinite_loss_fails_and_names_the_step(tmp_path):
    with pytest.raises(RunFailedError,
                       match=r"final train loss is nan at step 4 \(non-finite since step 3 of 4\)") as err:
        run(_nan_after(2), steps=4)
    assert len(err.value.result.losses) == 4
    assert math.isnan(run(_nan_after(2), steps=4, allow_nonfinite=True).final_loss)


def test_cli_exits_nonzero_on_final_nan_unless_allowed(tmp_path):
    import os

    spec = write_workload_file(tmp_path / "nan.py", NAN_AFTER.format(here=os.path.dirname(__file__), after=1))
    code, out, err = cli("run", spec, "--steps", "3")
    assert code == 1 and "final train loss is nan at step 3" in err and "Traceback" not in err
    assert "final train loss" in out  # the summary is still shown
    code, _, _ = cli("run", spec, "--steps", "3", "--allow-nonfinite")
    assert code == 0


def test_skip_step_that_skipped_every_step_fails(tmp_path):
    with pytest.warns(RuntimeWarning):
        with pytest.raises(RunFailedError, match=r"every one of the 3 steps run was skipped as non-finite"):
            run(_nan_after(0), Plan(nonfinite="skip_step"), steps=3)


def test_nonfinite_steps_do_not_push_out_good_checkpoints(tmp_path):
    run(_nan_after(2), steps=5, checkpoint_dir=tmp_path, checkpoint_every=1, keep_last_k=1, allow_nonfinite=True)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert "step_00000002.pt" in names  # the last finite one survives the NaN saves after it


def _m(losses, loss_diff=0.0, param_diff=0.0):
    return PlanMeasurement(plan=Plan(), step_seconds=0.1, losses=losses, loss_rel_diff=loss_diff,
                           param_rel_diff=param_diff)


def test_guard_rejects_nonfinite_losses_and_parameters_with_the_reason():
    cfg = GuardConfig()
    assert guard_rejection(_m([1.0, 0.9]), cfg) is None
    assert "loss is non-finite (nan) at step 2" in guard_rejection(_m([1.0, math.nan], loss_diff=math.nan), cfg)
    assert "non-finite" in guard_rejection(_m([1.0, 0.9], loss_diff=math.nan), cfg)
    assert "parameters are non-finite" in guard_rejection(_m([1.0, 0.9], param_diff=math.nan), cfg)
    assert "loss is non-finite (inf)" in guard_rejection(_m([math.inf, 0.9]), cfg)


def test_comparison_does_not_let_max_skip_nan():
    assert max([0.1, math.nan]) == 0.1  # the trap: builtin max() drops a NaN that is not first
    assert math.isnan(compare_losses([0.1, math.nan, 0.2], [1.0, 1.0, 1.0]).rel_diff)
    a, b, p0 = [torch.tensor([math.nan, 1.0])], [torch.tensor([1.0, 1.0])], [torch.zeros(2)]
    assert math.isnan(param_distance(a, b, p0))
