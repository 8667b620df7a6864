"""atomic_file: whole or nothing, with the permissions a plain open() would give."""

import os
import stat

import pytest

from torchsmith.atomic import atomic_file, atomic_write_text


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_get_the_mode_open_would_give(tmp_path, umask):
    before = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "plan.json", "{}")
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_leaves_the_previous_file_and_no_temp(tmp_path):
    path = atomic_write_text(tmp_path / "report.html", "old")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as f:
            f.write(b"half")
            raise RuntimeError("crash mid-write")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.html"]
