"""Small text helpers every layer shares: an error's first line, a byte count in words, and the
parsing of ``--budget`` and ``--memory-limit`` values (so a CLI can reject a bad one before it imports torch).

They sit at the bottom of the house so that library code (which must not import
``report``) and the renderers format the same thing the same way.

>>> first_line(AssertionError())
'AssertionError'
>>> format_bytes(3 * 2**20)
'3.0 MiB'
"""

from __future__ import annotations

import re


def first_line(err: BaseException | str) -> str:
    """The first non-empty line of an error's message, or its type's name when it has none.

    ``str(err).splitlines()[0]`` raises IndexError on an empty message (a bare ``assert``);
    this never raises.
    """
    text = err if isinstance(err, str) else str(err)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return "" if isinstance(err, str) else type(err).__name__


def format_bytes(n: float | None) -> str:
    """``1536 -> '1.5 KiB'``; ``None -> '-'``. Binary units, one decimal above bytes."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


_TIME = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
_SIZE = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
         "g": 1e9, "gb": 1e9, "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def parse_duration(text: str | float | int) -> float:
    """``"5m"`` -> 300.0; ``"90s"``, ``"1.5h"`` and plain seconds also work.

    >>> parse_duration("5m")
    300.0
    """
    if isinstance(text, (int, float)):
        return float(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text).lower())
    if not match or match.group(2) not in _TIME:
        raise ValueError(f"cannot read the time budget {text!r}; expected e.g. 90s, 5m or 1h.")
    return float(match.group(1)) * _TIME[match.group(2)]


def parse_bytes(text: str | int | None) -> int | None:
    """``"8GB"`` -> 8_000_000_000; ``"512MiB"``, ``"1.5g"`` and plain bytes also work.

    >>> parse_bytes("512MiB")
    536870912
    """
    if text is None or isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text).lower())
    if not match or match.group(2) not in _SIZE:
        raise ValueError(f"cannot read the memory limit {text!r}; expected e.g. 8GB, 512MiB or 2g.")
    return int(float(match.group(1)) * _SIZE[match.group(2)])
