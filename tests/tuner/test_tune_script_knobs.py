"""Each knob of a plan, injected into an unmodified script, is observably applied.

The scripts (tests/scripts/) write what they saw from inside: thread count, the optimizer's
`fused` flag, autocast inside the model's forward, whether the model is compiled and its blocks
checkpointed, the DataLoader's workers, the fp32 matmul precision.
"""

import json
import sys
from pathlib import Path

import pytest

from torchsmith.plan import Autocast, Backend, CheckpointBlocks, Compile, LoaderConfig, OptimizerImpl, Plan, Threads
from torchsmith.tuner.script.run import ScriptRunConfig, run_script

SCRIPTS = Path(__file__).parents[1] / "scripts"
ALL = Plan(threads=Threads(intra_op=1), optimizer=OptimizerImpl(impl="fused"), precision=Autocast(dtype="bfloat16"),
           compile=Compile(enabled=True), checkpointing=CheckpointBlocks(every=1),
           loader=LoaderConfig(num_workers=1, persistent_workers=True), backend=Backend(matmul_precision="high"))
SHORT = ScriptRunConfig(warmup=3, window=2, timeout_s=400)


def _run(script, plan, tmp_path, *args):
    observed = tmp_path / "observed.json"
    r = run_script([sys.executable, str(SCRIPTS / script), "--observe", str(observed), *args], plan, SHORT)
    assert r.ok, r.error
    return r, json.loads(observed.read_text())


def _assert_all_applied(r, seen, *, loader=True):
    assert seen["threads"] == 1
    assert seen["fused"] is True
    assert seen["autocast"] is True
    assert seen["compiled"] is True
    assert seen["checkpointed"] is True
    assert seen["matmul_precision"] == "high"
    assert seen["tune_env"] == "1"
    if loader:
        assert seen["num_workers"] == 1
    for knob in ("threads", "optimizer", "precision", "compile", "checkpointing", "matmul_precision"):
        assert r.applied[knob].status == "applied", (knob, r.applied)
    assert len(r.losses) == SHORT.warmup + SHORT.window and r.step_seconds > 0


@pytest.mark.slow
def test_every_knob_reaches_a_plain_loop(tmp_path):
    r, seen = _run("plain_loop.py", ALL, tmp_path)
    _assert_all_applied(r, seen)
    assert seen["persistent_workers"] is True
    assert r.facts["model"] == "Net"


@pytest.mark.slow
def test_as_written_plan_changes_nothing_in_a_plain_loop(tmp_path):
    r, seen = _run("plain_loop.py", Plan(), tmp_path)
    assert seen["fused"] is None and not seen["autocast"] and not seen["compiled"] and not seen["checkpointed"]
    assert seen["num_workers"] == 0 and seen["matmul_precision"] == "highest"
    assert r.applied == {}
    # optimizer.step's own time, measured on CPU for the knob order: a share of the step
    assert len(r.facts["optimizer_step_seconds"]) == SHORT.warmup + SHORT.window and 0 < r.optimizer_share < 1


@pytest.mark.slow
def test_every_knob_reaches_an_hf_trainer_script(tmp_path):
    # adamw_torch: the Trainer's default (adamw_torch_fused) already passes fused=True.
    r, seen = _run("hf_trainer.py", ALL, tmp_path, "--small", "--optim", "adamw_torch", "--out", str(tmp_path / "hf"))
    _assert_all_applied(r, seen, loader=False)
    assert r.facts["model"] == "GPT2LMHeadModel"


@pytest.mark.slow
def test_every_knob_reaches_a_lightning_script(tmp_path):
    r, seen = _run("lightning_script.py", ALL, tmp_path)
    _assert_all_applied(r, seen)
    assert r.facts["model"] == "Sequential"  # training_step calls self.net, not self(...)


@pytest.mark.slow
def test_framework_autocast_is_reported_as_written_not_wrapped_twice(tmp_path):
    plan = Plan(precision=Autocast(dtype="bfloat16"))
    r, seen = _run("lightning_script.py", plan, tmp_path, "--precision", "bf16-mixed")
    assert seen["autocast"] is True
    assert r.applied["precision"].status == "as_written", r.applied


@pytest.mark.slow
def test_knobs_reach_an_accelerate_loop():
    # accelerator.prepare() rebuilds the DataLoader as its own subclass and wraps the optimizer;
    # the script passes SGD(foreach=True) and trains a Sequential of mixed layers (no blocks).
    script = SCRIPTS / "accelerate_loop.py"
    r = run_script([sys.executable, str(script), "--steps", "40"], ALL.replace(compile=Compile()), SHORT)
    assert r.ok, r.error
    for knob in ("threads", "loader", "precision", "matmul_precision"):
        assert r.applied[knob].status == "applied", (knob, r.applied)
    assert r.applied["optimizer"].describe() == "as written: the script chose the SGD implementation"
    assert r.applied["checkpointing"].status == "not_applied"
    assert r.applied["checkpointing"].detail.startswith("activation checkpointing needs the model's repeated")
    assert r.facts["model"] == "Sequential" and all(ld["num_workers"] == 1 for ld in r.facts["loaders"])


@pytest.mark.slow
def test_an_optimizer_without_foreach_or_fused_is_named():
    script = SCRIPTS / "lbfgs.py"
    r = run_script([sys.executable, str(script), "--steps", "10"], Plan(optimizer=OptimizerImpl(impl="fused")), SHORT)
    assert r.ok, r.error
    assert r.applied["optimizer"].status == "not_applied"
    assert r.applied["optimizer"].detail == "LBFGS is not a torch.optim optimizer that takes foreach= or fused="


@pytest.mark.slow
def test_script_that_chose_its_optimizer_implementation_keeps_it(tmp_path):
    r, seen = _run("hf_trainer.py", Plan(optimizer=OptimizerImpl(impl="foreach")), tmp_path,
                   "--small", "--optim", "adamw_torch_fused", "--out", str(tmp_path / "hf"))
    assert seen["fused"] is True and not seen["foreach"]
    assert r.applied["optimizer"].status == "as_written", r.applied


@pytest.mark.slow
def test_knobs_reach_the_nanogpt_style_example():
    script = Path(__file__).parent.parent.parent / "examples" / "nanogpt_style" / "train.py"
    plan = ALL.replace(compile=Compile(), loader=LoaderConfig())  # compile is covered above; it has no DataLoader
    r = run_script([sys.executable, str(script), "--n-layer", "2", "--n-embd", "64", "--batch-size", "4"], plan, SHORT)
    assert r.ok, r.error
    assert r.facts["model"] == "GPT" and r.facts["optimizer"]["fused"] == [True, True]
    for knob in ("threads", "optimizer", "precision", "checkpointing"):
        assert r.applied[knob].status == "applied", (knob, r.applied)
    assert "transformer.h" in r.applied["checkpointing"].detail
    assert not r.written_files or all("ckpt" not in f for f in r.written_files)  # TORCHSMITH_TUNE=1: no saving
