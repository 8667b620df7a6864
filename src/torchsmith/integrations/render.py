"""Show a callback's findings with the CLI's own renderers (``torchsmith.report``)."""

from __future__ import annotations

import logging
from pathlib import Path

from torchsmith.integrations.watch import WatchReport

log = logging.getLogger("torchsmith.integrations")


def show(report: WatchReport, to_console: bool, report_dir: str | None) -> None:
    """Render ``report`` to the terminal (when ``to_console``) and write ``doctor.html`` into ``report_dir``."""
    from torchsmith.report.console import console
    from torchsmith.report.debug import render_finding, render_grads
    from torchsmith.report.doctor import render_doctor, write_doctor_html

    if report.doctor is None and report.doctor_error:
        log.warning("torchsmith doctor: no report: %s", report.doctor_error)
    if to_console:
        if report.doctor is not None:
            render_doctor(report.doctor, console)
        if report.grads is not None and report.grads.steps:
            render_grads(report.grads, console)
        for finding in report.nan_findings:
            render_finding(finding, console, finding.step or 0)
    if report_dir and report.doctor is not None:
        path = Path(report_dir) / "doctor.html"
        write_doctor_html(report.doctor, path)
        log.info("torchsmith doctor report: %s", path)
