"""Small text helpers every layer shares: an error's first line, a byte count in words.

They sit at the bottom of the house so that library code (which must not import
``report``) and the renderers format the same thing the same way.

>>> first_line(AssertionError())
'AssertionError'
>>> format_bytes(3 * 2**20)
'3.0 MiB'
"""

from __future__ import annotations


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
