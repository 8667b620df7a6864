"""``torchsmith tune -- python train.py ...``: tune an unmodified script (see torchsmith.tuner.script)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal, Optional, cast


def tune_script_command(command: list[str], *, budget: str, memory_limit: Optional[str], out: Path,
                        report: Optional[Path], knobs: Optional[str], window: Optional[int],
                        pairs: Optional[int], on_spread: str, as_json: bool = False) -> None:
    """Tune the command; ``as_json``: stdout holds one JSON object (report.tune_json), the rest goes to stderr."""
    import json

    import typer

    from torchsmith.cli.common import user_errors
    from torchsmith.inject import python_command
    from torchsmith.report.console import console, error_console
    from torchsmith.report.tune import render_tune, tune_progress
    from torchsmith.report.tune_html import write_tune_report
    from torchsmith.report.tune_json import tune_json
    from torchsmith.report.tune_script import render_script_tune
    from torchsmith.text import parse_bytes, parse_duration
    from torchsmith.tuner.script import ScriptTuneConfig, tune_script
    from torchsmith.tuner.script.run import ScriptRunConfig

    with user_errors():
        if on_spread not in ("guard", "refuse"):
            raise ValueError(f"--on-spread must be 'guard' or 'refuse', got {on_spread!r}.\n"
                             "Tip: --on-spread refuse stops when the script's own losses do not repeat.")
        cfg = ScriptTuneConfig(budget_seconds=parse_duration(budget), memory_limit=parse_bytes(memory_limit),
                               run=ScriptRunConfig(window=window or ScriptRunConfig.window),
                               on_spread=cast(Literal["guard", "refuse"], on_spread),  # checked above
                               knobs=tuple(knobs.split(",")) if knobs else None)
        if window is not None:  # exactly that many steps: not stretched to the 2 s floor
            cfg = replace(cfg, min_window_seconds=0.0)
        if pairs is not None:  # every comparison capped, the calibration's too
            cfg = replace(cfg, calibration_pairs=min(3, pairs), min_pairs=min(3, pairs), max_pairs=pairs,
                          proof_max_pairs=pairs)
        cmd = python_command(command)
        says = error_console if as_json else console  # --json: stdout holds the JSON object alone
        with tune_progress(out=says) as progress:
            result = tune_script(cmd, cfg, on_progress=progress)
        result.plan.save(out)
        report_path = write_tune_report(result, report) if report and report != Path("") else None  # --report "": none
    render_tune(result, says)
    render_script_tune(result, out, says)
    says.print(f"plan written to [bold]{out}[/]" + (f", report to [bold]{report_path}[/]" if report_path else ""))
    if as_json:
        typer.echo(json.dumps(tune_json(result)))
