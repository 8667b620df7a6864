"""tune -- python script.py: the loss guard, the baseline's reproducibility, failing candidates and
the exit code of run --plan -- ...

The planted behaviours live in tests/scripts/plain_loop.py: a loss that depends on the thread
count (so threads=1 is a loss-changing knob), unseeded noise, a crash and a hang at 1 thread.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from child_env import default_threads_env
from torchsmith.inject.outcome import KnobOutcome
from torchsmith.plan import Plan, Threads
from torchsmith.tuner import TuneError
from torchsmith.tuner.guard import GuardConfig
from torchsmith.tuner.script import ScriptTuneConfig, tune_script
from torchsmith.tuner.script.guard import baseline_spread, script_guard_rejection
from torchsmith.tuner.script.run import ScriptRun, ScriptRunConfig, run_script
from torchsmith.tuner.script.search import unapplied

SCRIPT = Path(__file__).parents[1] / "scripts" / "plain_loop.py"
SRC = Path(__file__).parent.parent.parent / "src"
RUN = ScriptRunConfig(warmup=2, window=3, timeout_s=120)
FEW = {"calibration_pairs": 1, "min_pairs": 2, "max_pairs": 2, "proof_max_pairs": 2, "min_window_seconds": 0.0}
"""Real-script tests check decisions other than speed (guard, crashes, knobs as written): few pairs, and one
A/A pair (the two runs the guard's spread needs; it bounds no noise)."""


def _threads_only(*args, **cfg):
    # Only threads=1 is tried: the as-written count on this machine is 2 or more (or 1 on a
    # 1-core machine, where nothing is tried and the planted knob cannot be tested).
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 cores for a threads candidate")
    return tune_script(
        [sys.executable, str(SCRIPT), *args],
        ScriptTuneConfig(budget_seconds=900, run=RUN, knobs=("threads",), **{**FEW, **cfg}),
        env=default_threads_env(),  # as a user's shell starts it: PyTorch's default thread count
    )


def test_guard_unit_rules():
    g = GuardConfig(loss_rtol=0.02)
    assert script_guard_rejection([1.0, 1.01], [1.0, 1.0], g)[0] is None
    why, diff = script_guard_rejection([1.0, 1.5], [1.0, 1.0], g)
    assert "50.00%" in why and "step 2" in why and diff == pytest.approx(0.5)
    why, diff = script_guard_rejection([1.0, math.nan], [1.0, 1.0], g)
    assert "nan at step 2" in why and diff == math.inf
    assert baseline_spread([1.0, 2.0], [1.0, 2.0]).reproducible
    s = baseline_spread([1.0, 2.0], [1.0, 2.2])
    assert not s.reproducible and s.worst_step == 1 and s.max_rel_diff == pytest.approx(0.1)


@pytest.mark.slow
def test_guard_rejects_a_planted_loss_changing_knob():
    r = _threads_only("--loss-scale-if-threads", "1")
    (c,) = r.candidates
    assert c.plan.threads == Threads(intra_op=1)
    assert c.status == "rejected" and "loss differs from the baseline by up to 50.00%" in c.reason
    assert r.plan == Plan() and r.spread.reproducible


@pytest.mark.slow
def test_non_reproducible_baseline_is_refused_with_its_spread():
    with pytest.raises(TuneError) as err:
        _threads_only("--unseeded-noise", on_spread="refuse")
    text = str(err.value)
    assert "differ between two runs with the same seeds by up to" in text and "Tip: seed the script" in text


@pytest.mark.slow
def test_non_reproducible_baseline_widens_the_guard_and_says_so():
    r = _threads_only("--unseeded-noise", on_spread="guard", max_spread=0.5)
    assert not r.spread.reproducible
    assert r.guard.loss_rtol == pytest.approx(0.02 + r.spread.max_rel_diff)
    assert any("widened by that spread" in n for n in r.notes)


@pytest.mark.slow
def test_a_crashing_candidate_is_reported_and_the_search_goes_on():
    r = _threads_only("--crash-if-threads", "1")
    (c,) = r.candidates
    assert c.status == "failed" and "crashed with exit code 1 after 2 steps: RuntimeError: planted crash" in c.reason
    assert r.plan == Plan() and r.best.status == "baseline"


def test_unapplied_names_why_a_knob_stayed_as_written():
    def said(knob, status, detail=""):
        return KnobOutcome(knob=knob, status=status, detail=detail)

    assert unapplied("optimizer", {"optimizer": said("optimizer", "applied", "AdamW(..., fused=True)")}) is None
    chose = said("optimizer", "as_written", "the script chose")
    assert unapplied("optimizer", {"optimizer": chose}) == chose
    assert unapplied("backend", {"matmul_precision": said("matmul_precision", "applied", "high")}) is None
    no_model = {"model": said("model", "not_applied", "no module whose parameters this optimizer holds was called")}
    assert unapplied("compile", no_model) == no_model["model"]
    why = unapplied("optimizer", no_model)
    assert why.status == "not_applied" and why.detail.startswith("the script built nothing the optimizer knob")


def test_knob_outcomes_cross_as_typed_json():
    o = KnobOutcome(knob="optimizer", status="refused", detail="AdamW(fused=True): bf16 not supported")
    assert KnobOutcome.from_json(json.loads(json.dumps(o.to_json()))) == o
    assert o.describe() == "refused: AdamW(fused=True): bf16 not supported"
    with pytest.raises(ValueError, match="status must be one of"):
        KnobOutcome.from_json({"knob": "optimizer", "status": "applied: AdamW"})


@pytest.mark.slow
def test_a_knob_the_script_fixes_itself_is_not_credited_with_noise():
    # The script passes foreach=True: every optimizer candidate runs the script as written, so
    # none may be accepted on its (noise) speed, and the other values are not run at all.
    r = tune_script([sys.executable, str(SCRIPT), "--foreach"],
                    ScriptTuneConfig(budget_seconds=900, run=RUN, knobs=("optimizer",), **FEW))
    (c,) = r.candidates
    assert c.status == "n/a" and c.speedup is None and c.reason.startswith("as written: the script chose the AdamW")
    assert r.plan == Plan()


@pytest.mark.slow
def test_a_hanging_run_is_stopped_at_its_time_limit(tmp_path):
    r = run_script(
        [sys.executable, str(SCRIPT), "--hang-if-threads", "1"],
        Plan(threads=Threads(intra_op=1)),
        ScriptRunConfig(warmup=2, window=3, timeout_s=8),
    )
    assert not r.ok and r.error.startswith(
        "hung: still running after its time limit of 8 s, before the end of its 5-step window"
    )
    assert r.wall_seconds < 30


@pytest.mark.slow
def test_side_effects_are_listed(tmp_path):
    target = tmp_path / "checkpoint.txt"
    r = run_script([sys.executable, str(SCRIPT), "--write", str(target)], Plan(), RUN)
    assert str(target) in r.written_files


@pytest.mark.slow
def test_run_plan_passes_the_exit_code_through_and_applies_the_plan(tmp_path):
    plan = tmp_path / "plan.json"
    Plan(threads=Threads(intra_op=1)).save(plan)
    observed = tmp_path / "observed.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchsmith",
            "run",
            "--plan",
            str(plan),
            "--",
            sys.executable,
            str(SCRIPT),
            "--steps",
            "12",
            "--exit-code",
            "3",
            "--observe",
            str(observed),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    assert "plain_loop done 12" in out.stdout  # ran to completion, not stopped after a window
    seen = json.loads(observed.read_text())
    assert seen["threads"] == 1 and seen["tune_env"] is None


def _stub_runs(monkeypatch, speed, noise=0.03, seed=0, optimizer_share=None):
    """run_script replaced: a plan's step time is 1 s over ``speed[impl]`` (as written: 1.0), times
    seeded lognormal noise of ``noise`` per run; returns the list of impls run, in order."""
    import random

    rng = random.Random(seed)
    ran = []

    def fake_run(command, plan, cfg, env=None):
        impl = plan.optimizer.impl
        ran.append(impl)
        seconds = math.exp(rng.gauss(0.0, noise)) / speed.get(impl, 1.0)
        applied = {} if impl == "as_written" else {
            "optimizer": KnobOutcome(knob="optimizer", status="applied", detail=f"AdamW(..., {impl})")}
        return ScriptRun(plan=plan, step_seconds=seconds, losses=[1.0, 0.9, 0.8], applied=applied,
                         wall_seconds=0.1, exit_code=0, facts={"device": "cpu"}, steps=cfg.warmup + cfg.window,
                         optimizer_share=optimizer_share)

    monkeypatch.setattr("torchsmith.tuner.script.search.run_script", fake_run)
    return ran


def test_only_a_win_whose_interval_clears_the_margin_is_kept(monkeypatch):
    # fused, tried first, is 1.01x here (inside the margin); foreach 1.25x; for_loop, what the CPU runs as
    # written, is not tried. Runs alternate B A A B. The stub's noise is seeded: with seed 1 fused's first 3
    # pairs read 0.99x (0.94-1.05), below the margin, so it stops there for futility (with seed 0 they read
    # 0.95-0.99, the 1 in 20 a 95% interval misses).
    ran = _stub_runs(monkeypatch, {"fused": 1.01, "foreach": 1.25, "for_loop": 0.8}, seed=1)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",)))
    by_impl = {c.plan.optimizer.impl: c for c in r.candidates}
    assert "for_loop" not in by_impl
    assert by_impl["fused"].status == "not distinguishable" and "low end above 1.03" in by_impl["fused"].reason
    assert by_impl["fused"].interval.pairs == 3  # its estimate is below the margin: no more pairs for it
    assert by_impl["foreach"].status == "accepted" and by_impl["foreach"].interval.low > 1.03
    assert r.plan.optimizer.impl == "foreach"
    assert r.speedup_interval.low <= 1.25 <= r.speedup_interval.high and r.speedup_interval.pairs >= 3
    # The probe (it is the first A) and 3 A/A calibration pairs come first; then each pair runs its candidate first.
    assert ran[:7] == ["as_written"] * 6 + ["fused"]
    assert r.noise is not None and r.noise.pairs == 3 and any("runs differ by" in n for n in r.notes)


def test_a_large_optimizer_share_is_searched_before_threads_and_a_tiny_one_not_at_all(monkeypatch):
    ran = _stub_runs(monkeypatch, {"fused": 1.25}, optimizer_share=0.4)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("threads", "optimizer")))
    assert ran[6] in ("foreach", "fused")  # after the probe and the A/A pairs, the optimizer's first candidate
    assert [c.knob for c in r.candidates][0] == "optimizer" and any("tried first" in n for n in r.notes)
    ran = _stub_runs(monkeypatch, {"fused": 1.25}, optimizer_share=0.01)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",)))
    assert set(ran) == {"as_written"} and r.plan.optimizer.impl == "as_written"
    assert [k for k, _ in r.skipped] == ["optimizer"] and "at most 1.010x" in r.skipped[0][1]


def test_a_lucky_process_is_not_a_win(monkeypatch):
    # No knob changes anything, but runs vary by 20%: one lucky look once read 2.34x. Nothing may be adopted.
    _stub_runs(monkeypatch, {}, noise=0.2, seed=3)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",)))
    assert r.plan == Plan() and r.speedup_interval is None
    assert all(c.status != "accepted" for c in r.candidates)
    assert any("too noisy" in n for n in r.notes)


def test_a_search_win_the_proof_does_not_confirm_returns_as_written(monkeypatch):
    # fused is 1.3x while the search runs and no faster in the proof (a neighbour came and went).
    _stub_runs(monkeypatch, {"fused": 1.3})
    real = tune_script.__globals__["run_script"]
    stage = {"knob": ""}

    def drifting(command, plan, cfg, env=None):
        r = real(command, plan, cfg, env)
        if stage["knob"] == "proof" and plan.optimizer.impl == "fused":
            r.step_seconds *= 1.3
        return r

    monkeypatch.setattr("torchsmith.tuner.script.search.run_script", drifting)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",)),
                    on_progress=lambda p: stage.update(knob=p.knob))
    assert any(c.status == "accepted" and c.plan.optimizer.impl == "fused" for c in r.candidates)
    assert r.plan == Plan() and any("the final proof against the script as written gave" in n for n in r.notes)


@pytest.mark.parametrize("per_core, busy", [(4.0, True), (0.3, False)])
def test_a_busy_machine_is_named_in_the_notes(monkeypatch, per_core, busy):
    _stub_runs(monkeypatch, {})
    monkeypatch.setattr("torchsmith.tuner.script.search.load_per_core", lambda: per_core)
    r = tune_script(["train.py"], ScriptTuneConfig(budget_seconds=60, knobs=("optimizer",)))
    said = [n for n in r.notes if n.startswith("the machine was busy when tune started")]
    assert bool(said) == busy
    assert not said or "load average 4.0 per core" in said[0]
