"""The bottom floor's text helpers: an error's first line, bytes in words, budget and size parsing."""

import pytest

from torchsmith.text import first_line, format_bytes, parse_bytes, parse_duration


def test_first_line_of_an_empty_message_is_the_type():
    assert first_line(AssertionError()) == "AssertionError"
    assert first_line("\n  second\nthird") == "second"


def test_format_bytes():
    assert format_bytes(None) == "-"
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * 2**20) == "3.0 MiB"


@pytest.mark.parametrize("text, seconds", [("5m", 300), ("90s", 90), ("1.5h", 5400), (42, 42)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, n", [("8GB", 8_000_000_000), ("512MiB", 512 * 2**20), ("2g", 2_000_000_000)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("bad", ["lots", "8 parsecs", "-1GB"])
def test_unparsable_memory_limit(bad):
    with pytest.raises(ValueError, match="cannot read the memory limit"):
        parse_bytes(bad)


def test_unreadable_budget_is_named():
    with pytest.raises(ValueError, match="cannot read the time budget 'soon'"):
        parse_duration("soon")
