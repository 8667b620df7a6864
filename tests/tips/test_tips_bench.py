"""bench tips: candidates come from the registry, failures are reported, folklore is measured."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from torchsmith.engine.space import device_info, search_space
from torchsmith.plan import MicroBatching, Plan
from torchsmith.tips import TipsReport, candidates, measure_candidates
from torchsmith.tips.folklore import check_addmm, check_empty_cache, check_jit_script
from torchsmith.transforms import base
from torchsmith.workload import load_workload

CPU = torch.device("cpu")


def test_candidates_cover_every_registered_transform_for_the_device():
    cands = candidates(CPU)
    assert {c.transform for c in cands} == {d.name for d in search_space(device_info(CPU))}
    for c in cands:
        changed = [f.name for f in dataclasses.fields(Plan) if getattr(c.plan, f.name) != getattr(Plan(), f.name)]
        assert len(changed) == 1, (c.label, changed)  # each candidate is one transform alone


def test_a_transform_of_your_own_joins_the_candidates_from_its_info_alone():
    info = base.TransformInfo(name="zz_test_only", plan_field="microbatching", summary="test",
                              devices=frozenset({"cpu"}), candidates=lambda d: [MicroBatching(count=8)],
                              trade="speed", rank=lambda d: 0)
    labels = [c.label for c in candidates(CPU, only=["zz_test_only"], extra=(info,))]
    assert labels == ["microbatching.count=8"]
    with pytest.raises(ValueError, match="zz_test_only"):
        candidates(CPU, only=["zz_test_only"])  # not registered unless passed: no global side effect


@pytest.fixture(scope="module")
def measured():
    return measure_candidates(load_workload("mlp"), steps=2, warmup=1, device="cpu",
                              only=["optimizer", "memory_format", "microbatching"])


def test_measures_candidates_against_the_baseline_and_reports_refusals(measured):
    base_m, rows = measured
    assert base_m.ok and base_m.step_seconds > 0 and base_m.peak_memory_bytes > 0
    by_label = {r.label: r for r in rows}
    refused = by_label["memory_format.channels_last=True"]
    assert not refused.ok and "channels_last" in refused.error and refused.speed is None
    for r in rows:
        if r.transform == "optimizer":
            # Same maths, same seed and batches: the losses agree to float rounding.
            assert r.ok and r.speed > 0 and r.speed_best > 0 and r.loss_rel_diff < 1e-5, r
            assert 0.8 < r.memory < 1.25, r
    # Micro-batching splits the batch: its loss matches up to summation order.
    assert by_label["microbatching.count=4"].loss_rel_diff < 1e-4


def test_report_renders_to_json_and_markdown(measured):
    from torchsmith.measure.fingerprint import machine_fingerprint
    from torchsmith.report.tips import tips_to_dict, tips_to_markdown

    base_m, rows = measured
    report = TipsReport(workload="mlp", device="cpu", machine=machine_fingerprint(), steps=2, warmup=1,
                        baseline=base_m, rows=rows, folklore=[check_empty_cache("cpu", iters=2)],
                        load_average=(1.0, 1.0), finished_utc="now")
    data = json.loads(json.dumps(tips_to_dict(report)))
    assert len(data["candidates"]) == len(rows)
    md = tips_to_markdown(report, "torchsmith bench tips mlp")
    assert machine_fingerprint().cpu_model in md
    assert md.count("\n| ") == len(rows) + 1  # header + one row per candidate
    assert "channels_last" in md and "empty_cache" in md


def test_addmm_check_measures_memory_and_different_maths():
    r = check_addmm(n=256)
    f = r.figures
    assert f["mm_plus_peak_bytes"] == 2 * f["matrix_bytes"]  # x @ y temporary, then the sum
    assert f["mm_plus_kept_bytes"] == f["matrix_bytes"]
    assert f["addmm_out_of_place_peak_bytes"] == f["matrix_bytes"]
    assert f["addmm_out_of_place_rel_err"] < 1e-5
    assert f["rel_diff_x_plus_yx_vs_xy_plus_x"] > 0.1  # x + y@x is not x@y + x
    assert "x + y@x" in r.verdict


def test_empty_cache_cannot_free_a_retained_graph():
    r = check_empty_cache("cpu", iters=3)
    f = r.figures
    assert f["held_bytes"] >= 2 * f["saved_bytes_per_iter"] > 0  # graphs pile up per iteration
    assert f["held_bytes_after_empty_cache"] == f["held_bytes"]
    assert f["held_bytes_with_item"] < 0.05 * f["held_bytes"]
    if not torch.cuda.is_available():
        assert r.skipped and "CUDA" in r.skipped[0]


@pytest.mark.slow
def test_jit_script_is_timed_against_eager_and_compile():
    r = check_jit_script("cpu", numel=1 << 14, rounds=3, inner=2)
    f = r.figures
    assert f["eager_seconds"] > 0 and f["jit.script_seconds"] > 0
    assert f["script_max_abs_diff"] < 1e-5
    if shutil.which("g++") or shutil.which("c++"):  # Inductor's CPU backend needs a C++ compiler
        assert "compile_seconds" in f and f["compile_max_abs_diff"] < 1e-4
    else:
        assert any(d.startswith("compile failed") for d in r.details)
    assert "deprecated" in (f["script_deprecation_warning"] or "")
    assert any("maintenance mode" in d for d in r.details)


def test_bench_tips_json_command():
    from torchsmith.cli import app

    out = CliRunner().invoke(app, ["bench", "tips", "mlp", "--only", "optimizer", "--no-folklore",
                                   "--steps", "2", "--warmup", "1", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout[out.stdout.index("{"):])
    assert [c["transform"] for c in data["candidates"]] == ["optimizer"] * 2  # fused, foreach: for_loop is as written
    assert data["machine"]["torch_version"] == torch.__version__


def test_unknown_transform_name_is_a_clear_error():
    with pytest.raises(ValueError, match="no transform named 'nope'.*registered: .*checkpointing"):
        candidates(CPU, only=["nope"])


def test_speed_pairs_steps_by_round_so_drifting_load_cancels():
    from torchsmith.harness.compare import PlanMeasurement
    from torchsmith.tips.candidates import TipCandidate, tip_row

    # The machine slows down 4x over the run; the candidate is always twice as fast as the
    # baseline step of the same round.
    base_m = PlanMeasurement(Plan(), 2.5, step_times=[1.0, 2.0, 3.0, 4.0], peak_memory_bytes=100)
    cand = PlanMeasurement(Plan(), 1.25, step_times=[0.5, 1.0, 1.5, 2.0], peak_memory_bytes=50)
    row = tip_row(TipCandidate("x", Plan()), cand, base_m)
    assert row.speed == 2.0 and row.noise == 0.0 and row.memory == 0.5 and row.speed_best == 2.0
    # Same times, rounds shuffled: the pairing sees the inconsistency and reports it as noise.
    shuffled = PlanMeasurement(Plan(), 1.25, step_times=[2.0, 1.5, 1.0, 0.5], peak_memory_bytes=50)
    assert tip_row(TipCandidate("x", Plan()), shuffled, base_m).noise > 1.0
