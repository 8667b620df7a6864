"""The tune report from a synthetic result: written through the public API, and on several ranks the
strategies side by side and the scaling curves."""

from __future__ import annotations

import dataclasses

from scale_fixtures import synthetic_scale_inputs
from torchsmith.measure.fingerprint import machine_fingerprint
from torchsmith.plan import Plan, Zero1
from torchsmith.report.tune_html import render_tune_html, write_tune_report
from torchsmith.tuner import GuardConfig
from torchsmith.tuner.result import Candidate, TuneResult
from torchsmith.tuner.scale_rows import scale_rows


def _one_rank_result() -> TuneResult:
    base = Candidate(Plan(), "baseline", "baseline", 0.05, 1.0, 5 * 2**20, 1.0, 0.0, 0.0, None, change="as written")
    return TuneResult(workload="mlp", plan=Plan(), baseline=base, best=base, candidates=[base],
                      throughput_unit="samples/s",
                      items_per_step=64, budget_seconds=60, elapsed_seconds=50, memory_limit_bytes=None,
                      guard=GuardConfig(), fingerprint=machine_fingerprint(), device="cpu",
                      baseline_losses=[1.0, 0.9], best_losses=[1.0, 0.9])


def test_write_tune_report_writes_the_page_atomically_and_returns_its_path(tmp_path):
    path = tmp_path / "report.html"
    assert write_tune_report(_one_rank_result(), path) == path
    assert path.read_text().startswith("<!doctype html>") and list(tmp_path.iterdir()) == [path]  # no temp left


def test_a_report_on_two_ranks_shows_the_strategies_and_the_scaling_curves():
    r = _one_rank_result()
    assert "Strategies side by side" not in render_tune_html(r)  # one process: nothing about ranks
    zero1 = Candidate(Plan(parallel=Zero1()), "parallel", "slower", 0.08, 0.62, 3 * 2**20, 0.6, 0.0, 0.0, None,
                      change="parallel=zero1")
    measured = {"ddp": (0.05, 5 * 2**20), "zero1": (0.08, 3 * 2**20)}
    rows = scale_rows(synthetic_scale_inputs(), nproc=2, measured=measured)
    on_ranks = dataclasses.replace(r, ranks=2, scale=rows, interconnect="100Gbps,5us",
                                   candidates=[*r.candidates, zero1])
    page = render_tune_html(on_ranks)
    assert "Strategies side by side, on 2 ranks" in page and "parallel=zero1" in page
    assert "DDP, PyTorch&#x27;s defaults (as written)" in page or "DDP, PyTorch's defaults (as written)" in page
    assert "Scaling: predicted, with the points measured here" in page and "100Gbps,5us" in page
    assert page.count("<img") >= 4  # throughput, memory, loss, and the scaling curves
    assert page.count("<tr>") >= 12 + 3  # a row per strategy and rank count, and the strategies' table
