"""-v / -q set how much library diagnostics reach stderr; warnings go through the same handler."""

import logging
import warnings

import pytest
from typer.testing import CliRunner

from torchsmith.cli import app
from torchsmith.report.console import configure_logging


def _reset():
    logging.captureWarnings(False)
    for name in ("torchsmith", "py.warnings"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.setLevel(logging.NOTSET)
        lg.propagate = True


@pytest.fixture(autouse=True)
def _restore_logging():
    _reset()  # an earlier CLI invocation in this process may have captured warnings already
    yield
    _reset()


def _emit(capsys):
    logging.getLogger("torchsmith.tuner.search").info("an info line")
    logging.getLogger("torchsmith.measure.peak").warning("a warning line")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library RuntimeWarning", RuntimeWarning, stacklevel=1)
    return capsys.readouterr().err


def test_default_shows_warnings_not_info(capsys):
    configure_logging()
    err = _emit(capsys)
    assert "a warning line" in err and "a library RuntimeWarning" in err and "an info line" not in err


def test_verbose_shows_info(capsys):
    configure_logging(verbose=1)
    assert "an info line" in _emit(capsys)


def test_quiet_shows_errors_only(capsys):
    configure_logging(quiet=True)
    err = _emit(capsys)
    assert "a warning line" not in err and "RuntimeWarning" not in err


def test_the_cli_accepts_the_flags():
    for flags in (["-v"], ["-vv"], ["-q"]):
        result = CliRunner().invoke(app, [*flags, "data", "--help"])
        assert result.exit_code == 0, result.output
