"""The rich consoles every renderer writes to, and small formatting helpers."""

from __future__ import annotations

import sys

from rich.console import Console

from torchsmith.text import format_bytes as fmt_bytes  # noqa: F401  (re-exported for renderers)

# Piped or captured output has no terminal width; rich would wrap every table at 80 columns.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
error_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 132)


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Library diagnostics (``logging``, and ``warnings`` routed into it) go to stderr through rich.

    Default: warnings and errors. ``verbose=1``: also info (e.g. each tune decision);
    ``verbose>=2``: debug. ``quiet``: errors only.
    """
    import logging

    from rich.logging import RichHandler

    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logger = logging.getLogger("torchsmith")
    logger.handlers[:] = [RichHandler(console=error_console, show_time=False, show_path=verbose >= 2,
                                      markup=False, rich_tracebacks=False)]
    logger.setLevel(level)
    logger.propagate = False
    logging.captureWarnings(True)  # the library's RuntimeWarnings (compile fallback, ...) obey -q too
    py_warnings = logging.getLogger("py.warnings")
    py_warnings.handlers[:] = logger.handlers
    py_warnings.setLevel(level)
    py_warnings.propagate = False


def fmt_rate(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"
