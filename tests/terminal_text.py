"""What a user reads in a CLI's output, for assertions that should not depend on the terminal's width."""


def unwrapped(text: str) -> str:
    """``text`` with every run of whitespace made one space. rich wraps long lines at the terminal's
    width (80 columns under pytest), so a long temporary path, or a longer checkout path in CI, moves
    the line breaks: ``"is a directory" in unwrapped(err)`` holds wherever they fall."""
    return " ".join(text.split())
