"""What a script tuning run adds to the tune report: how to apply the plan (no edit, or the edit),
how each knob was applied, the baseline's reproducibility and the files each run wrote."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.syntax import Syntax

from torchsmith.report.console import console
from torchsmith.report.html import esc, table


def render_script_tune(r, out_path: Path, out: Console = console) -> None:
    """Terminal: the machine's noise, the claim's interval, the winner's knobs as applied, the code
    change and the side effects."""
    if r.noise is not None:
        out.print(f"[dim]noise (A/A, script as written against itself): {r.noise.describe()}[/]")
    if r.pooled_noise is not None and r.pooled_noise.pairs > (r.noise.pairs if r.noise else 0):
        out.print(f"[dim]noise over the whole tune (A/A, candidates and proof, pooled; as sure as an A/A run of "
                  f"{r.pooled_noise.pairs} pairs): {r.pooled_noise.describe()}[/]")
    if r.speedup_interval is not None:
        out.print(f"proof against the script as written: [bold]{r.speedup_interval.describe()}[/] "
                  f"(fresh processes in alternating pairs, {r.window}-step windows)")
    if r.spread is not None:
        out.print(
            f"[dim]baseline reproducibility: two as-written runs differ by up to {r.spread.max_rel_diff:.2e} "
            f"in loss over {r.spread.steps} steps; guard tolerance {r.guard.loss_rtol:.2%}[/]"
        )
    for knob, how in r.applied.items():
        out.print(f"[dim]{knob}: {how.describe()}[/]")
    files = sorted({f for fs in r.written_files.values() for f in fs})
    if files:
        out.print(
            f"[yellow]side effects:[/] the runs opened {len(files)} file(s) for writing "
            "(runs carry TORCHSMITH_TUNE=1 so the script can skip its saving):"
        )
        for f in files[:10]:
            out.print(f"  {f}", highlight=False)
        if len(files) > 10:
            out.print(f"  ... {len(files) - 10} more in the report", highlight=False)
    out.print(f"apply it, no edit: [bold]torchsmith run --plan {out_path} -- {shlex.join(r.command)}[/]")
    if r.code_change:
        out.print("or adopt it in the script:")
        out.print(Syntax("\n".join(r.code_change), "python", theme="ansi_dark", background_color="default"))


def script_sections(r) -> list[str]:
    """HTML sections replacing the workload report's "Use it"."""
    spread = (
        "<p>The as-written script ran twice with the same seeds; its losses "
        + (
            "repeated exactly.</p>"
            if r.spread.reproducible
            else f"differed by up to {r.spread.max_rel_diff:.2%}. The guard says so in the notes above.</p>"
        )
        if r.spread is not None
        else ""
    )
    cmd = shlex.join(r.command)
    use = (
        "<h2>Use it</h2><p>No edit: the plan is injected at start-up.</p>"
        f"<pre>torchsmith run --plan plan.json -- {esc(cmd)}</pre>"
        + (
            "<p>Or adopt it in the script itself:</p><pre>" + esc("\n\n".join(r.code_change)) + "</pre>"
            if r.code_change
            else ""
        )
    )
    outcomes = [(k, o.describe()) for k, o in r.applied.items()]
    applied = (
        "<h2>How each knob was applied</h2>" + table(["knob", "applied"], outcomes) if r.applied else ""
    )
    rows = [(label, "<br>".join(esc(f) for f in files) or "none") for label, files in r.written_files.items()]
    written = (
        "<h2>Side effects: files each run opened for writing</h2><p class=sub>Runs carry TORCHSMITH_TUNE=1 "
        "in their environment so a script can skip its own saving; temporary files gone at the end of a run "
        "are left out.</p>" + _raw_table(rows)
    )
    guard = (
        "<p>For a script the guard compares the loss of every step (the scalars passed to backward, "
        f"summed per optimizer step) over the first {r.guard.steps} steps, within {r.guard.loss_rtol:.2%}; "
        "no parameters come back from a script run, so the parameter check above does not apply.</p>"
    )
    noise = _noise_section(r)
    return [noise, "<h2>Reproducibility of the baseline</h2>" + spread + guard, use, applied, written]


def _noise_section(r) -> str:
    """How sure the claims are: the A/A calibration and the proof's interval."""
    if r.noise is None:
        return ""
    pooled = (f"<p>Pooled over every experiment of the tune (the A/A run, the candidates and the proof; as "
              f"sure as an A/A run of {r.pooled_noise.pairs} pairs): {esc(r.pooled_noise.describe())}.</p>"
              if r.pooled_noise is not None and r.pooled_noise.pairs > r.noise.pairs else "")
    proof = (f"<p>The plan against the script as written, in fresh process pairs: "
             f"<b>{esc(r.speedup_interval.describe())}</b>.</p>" if r.speedup_interval is not None else
             "<p>No plan cleared the margin against the script as written: it is returned as written.</p>")
    return (
        "<h2>Measurement noise</h2><p>Every ratio comes from pairs of fresh processes, one per plan, in "
        f"alternating order (B A, A B, ...), each measuring {r.window} steps. The script as written was first "
        f"measured against itself: {esc(r.noise.describe())}. A candidate is kept only when the low end of its "
        "95% interval clears the margin; a close call gets more pairs, then is not distinguishable.</p>" + pooled
        + proof
    )


def _raw_table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td>{esc(a)}</td><td>{b}</td></tr>" for a, b in rows)
    return f"<table><tr><th>run</th><th>files</th></tr>{body}</table>"
