"""The self-contained HTML report of a tuning run."""

from __future__ import annotations

import os
from pathlib import Path

from torchsmith.atomic import atomic_write_text
from torchsmith.report.console import fmt_bytes, fmt_rate
from torchsmith.report.html import esc, figure_to_img, fingerprint_table, page, table
from torchsmith.report.scale_html import scale_sections
from torchsmith.report.step_time_plot import step_time_boxes
from torchsmith.report.tune import interval_range
from torchsmith.tuner.result import Candidate, TuneResult

_COLOURS = {
    "baseline": "#6e7781",
    "accepted": "#1a7f37",
    "beaten": "#4ac26b",
    "slower": "#8c959f",
    "not distinguishable": "#bf8700",
    "rejected": "#cf222e",
    "failed": "#9a6700",
    "n/a": "#d0d7de",
}


def write_tune_report(result: TuneResult, path: str | os.PathLike) -> Path:
    """Write ``result`` as a self-contained HTML report, atomically; return its path.

    Example::

        result = torchsmith.tune("mlp", budget="2m")
        torchsmith.write_tune_report(result, "report.html")
    """
    return atomic_write_text(path, render_tune_html(result))


def render_tune_html(r: TuneResult) -> str:
    unit = r.throughput_unit
    measured = [c for c in r.candidates if c.step_seconds]
    claimed = r.speedup_interval
    interval_kpi = (f"95% re-measurement interval {claimed.low:.2f}-{claimed.high:.2f}, {claimed.pairs} pairs"
                    if claimed else "as written: nothing to change")
    kpis = (
        f"<div class=kpi><div>speedup<b class={'ok' if (r.speedup or 0) > 1 else ''}>{r.speedup or 1:.2f}x</b>"
        f"{esc(interval_kpi)}</div>"
        f"<div>baseline<b>{fmt_rate(r.throughput(r.baseline), unit)}</b></div>"
        f"<div>tuned<b>{fmt_rate(r.throughput(r.best), unit)}</b></div>"
        f"<div>peak memory<b>{fmt_bytes(r.best.peak_memory_bytes)}</b>"
        f"vs {fmt_bytes(r.baseline.peak_memory_bytes)}</div>"
        + (
            f"<div>MFU<b>{r.best_mfu:.0%}</b>vs {r.baseline_mfu:.0%} as written; "
            "of the measured matmul peak of each plan's dtype</div>"
            if r.baseline_mfu is not None and r.best_mfu is not None
            else ""
        )
        + f"<div>search time<b>{r.elapsed_seconds:.0f} s</b>budget {r.budget_seconds:.0f} s</div></div>"
    )
    sections = [
        kpis,
        f"<h2>Tuned plan</h2><p><b>{esc(r.plan.describe())}</b></p>",
        "".join(f"<p class=warn>{esc(n)}</p>" for n in r.notes),
        "<h2>How sure</h2><p>" + esc(_proof_sentence(r)) + "</p>"
        + (f"<p class=sub>Noise, measured first (as written against itself): {esc(r.noise.describe())}.</p>"
           if r.noise is not None else ""),
        "<h2>Step times in the final proof</h2><p class=sub>Each timed step of the baseline and of the plan, "
        "interleaved in the same run; the box spans the middle half, the line is the median.</p>"
        + step_time_boxes(_proof_series(r), "step times: as written vs tuned"),
        "<h2>Throughput per candidate</h2><p class=sub>Each candidate's speedup over the baseline measured "
        f"beside it, applied to the final baseline measurement, with its 95% interval; {r.warmup_steps} warm-up "
        f"steps, then {r.timed_steps} timed steps per candidate and round, each step paired with the baseline's "
        "step of the same round.</p>" + _bar_chart(r, measured, "throughput"),
        "<h2>Peak memory per candidate</h2>" + _bar_chart(r, measured, "memory"),
        *scale_sections(r),
        "<h2>Loss: baseline vs tuned (same seed, same batches)</h2>" + _loss_chart(r),
        "<h2>All candidates</h2>" + _candidate_table(r, r.candidates),
        "<h2>Rejected and failed</h2>"
        + (
            _candidate_table(r, [c for c in r.candidates if c.status in ("rejected", "failed", "n/a")]) or "<p>none</p>"
        ),
        "<h2>Not searched</h2>"
        + (table(["knob", "why"], r.skipped) if r.skipped else "<p>every knob was searched</p>"),
        f"<h2>Guard</h2><p>loss within {r.guard.loss_rtol:.1%} of the baseline at every measured step; final "
        f"parameters within {r.guard.param_rtol:.1%} of the distance training moved them.</p>",
        f"<h2>Machine</h2><p>device: {esc(r.device)}</p>" + fingerprint_table(r.fingerprint),
        '<h2>Use it</h2><pre>step = torchsmith.prepare(torchsmith.Plan.load("plan.json"), model, optimizer, loss_fn)\n'
        "for batch in loader:\n    loss = step(batch)</pre>",
    ]
    if getattr(r, "command", None):  # a script: how to apply the plan to it, and its side effects
        from torchsmith.report.tune_script import script_sections

        sections[-1:] = script_sections(r)
    return page(f"torchsmith tune · {r.workload}", f"{r.device} · {len(r.candidates)} candidates measured", sections)


def _candidate_table(r: TuneResult, cands: list[Candidate]) -> str:
    if not cands:
        return ""
    rows = [
        (
            c.status,
            c.knob,
            c.change,
            f"{c.speedup:.2f}x" if c.speedup else "-",
            interval_range(c.interval),
            str(c.interval.pairs) if c.interval else "-",
            fmt_rate(r.throughput(c), r.throughput_unit),
            fmt_bytes(c.peak_memory_bytes),
            f"{c.loss_rel_diff:.2e}" if c.loss_rel_diff is not None else "-",
            f"{c.compile_seconds:.1f} s" if c.compile_seconds is not None else "-",
            c.reason,
        )
        for c in cands
    ]
    return table(
        [
            "status",
            "knob",
            "change tried",
            "speed vs baseline",
            "95% interval",
            "pairs",
            "throughput",
            "peak memory",
            "max loss diff",
            "compile",
            "why",
        ],
        rows,
        numeric=(3, 4, 5, 6, 7, 8, 9),
    )


def _bar_chart(r: TuneResult, cands: list[Candidate], what: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not cands:
        return "<p>no candidate was measured</p>"
    values = [(r.throughput(c) or 0) if what == "throughput" else (c.peak_memory_bytes or 0) / 2**20 for c in cands]
    fig, ax = plt.subplots(figsize=(10, 0.38 * len(cands) + 1.2))
    labels = [c.change if len(c.change) < 60 else c.change[:58] + "…" for c in cands]
    errors = None
    if what == "throughput":
        spans = [_relative_span(c) for c in cands]
        errors = [[v * low for v, (low, _) in zip(values, spans, strict=True)],
                  [v * high for v, (_, high) in zip(values, spans, strict=True)]]
    ax.barh(range(len(cands)), values, color=[_COLOURS[c.status] for c in cands], xerr=errors, ecolor="#24292f",
            capsize=2)
    ax.set_yticks(range(len(cands)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(r.throughput_unit if what == "throughput" else "peak memory (MiB)")
    if what == "memory" and r.memory_limit_bytes:
        ax.axvline(r.memory_limit_bytes / 2**20, color="#cf222e", linestyle="--")
        ax.text(r.memory_limit_bytes / 2**20, -0.6, " memory limit", color="#cf222e", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, color=col) for col in _COLOURS.values()]
    ax.legend(handles, list(_COLOURS), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return figure_to_img(fig, f"{what} per candidate")


def _relative_span(c: Candidate) -> tuple[float, float]:
    """How far the interval reaches below and above the estimate, relative: the error bar of a bar
    drawn at the estimate (throughput x low/estimate .. x high/estimate). None drawn when unbounded."""
    iv = c.interval
    if iv is None or not iv.bounded or iv.estimate <= 0:
        return 0.0, 0.0
    return 1 - iv.low / iv.estimate, iv.high / iv.estimate - 1


def _proof_sentence(r: TuneResult) -> str:
    if r.speedup_interval is not None:
        decided = (f" It was adopted because the 95% interval of the true speedup, {r.decided_by.low:.2f}-"
                   f"{r.decided_by.high:.2f}, clears the noise margin." if r.decided_by is not None else "")
        return (f"Re-measured beside the as-written plan, the tuned plan runs at {r.speedup_interval.describe()}: "
                "an independent re-measurement in fresh processes (torchsmith verify) lands inside it 95 times in "
                "100 on this machine at this load. It is the proof's 95% interval widened for the re-measurement's "
                "own noise (docs/tune.md, 'How to read an interval')." + decided)
    return "The as-written plan is returned: no candidate's interval cleared the noise margin in the final proof."


def _proof_series(r: TuneResult) -> list[tuple[str, list[float]]]:
    if r.as_written:
        return [("as written", r.baseline_step_times)]
    return [("as written", r.baseline_step_times), ("tuned", r.best_step_times)]


def _loss_chart(r: TuneResult) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not r.baseline_losses:
        return "<p>no losses recorded</p>"
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(range(1, len(r.baseline_losses) + 1), r.baseline_losses, marker="o", label="as written")
    if r.best_losses and r.plan.describe() != "as written":
        ax.plot(range(1, len(r.best_losses) + 1), r.best_losses, marker="x", linestyle="--", label="tuned")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    return figure_to_img(fig, "loss of baseline and tuned plan")
