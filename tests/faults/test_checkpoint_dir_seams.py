"""The checkpoint directory under other processes and file systems, with real processes and mounts:

* --overwrite x a concurrently running writer: refused while the writer lives (it holds
  ``.torchsmith.lock``), its checkpoints stay whole; once it has exited, --overwrite works.
* disk full x manifest write: the error names the manifest, the unverifiable .pt is removed, the
  older checkpoints stay good, and after freeing space --resume continues bit-exact.
* a checkpoint dir on a read-only mount x --resume: refused in one line before step 1 (resume
  would have to write its next checkpoint there); the checkpoints copied to a writable directory
  resume bit-exact, as the Tip says.

The mounts need root and a kernel that lets this process mount tmpfs; otherwise those tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest
from fault_helpers import one_line_error
from fault_procs import FAULT_WORKLOAD, finish, start, torchsmith, wait_for

from torchsmith.engine.checkpoint import list_checkpoints, load_checkpoint

pytestmark = [pytest.mark.slow]


def run(ckpt, steps, *extra, workload=FAULT_WORKLOAD):
    return ["run", workload, "--steps", steps, "--checkpoint-dir", ckpt, "--checkpoint-every", 2, "--device", "cpu",
            "--json", *extra]


def test_overwrite_x_concurrent_writer_is_refused_and_the_writer_keeps_its_checkpoints(tmp_path):
    ckpt = tmp_path / "c"
    writer = start(run(ckpt, 100000, "--checkpoint-every", 10, workload="mlp"), tmp_path)
    try:
        wait_for(lambda: (ckpt / "step_00000010.pt.json").exists() or writer.poll() is not None, what="step 10")
        assert writer.poll() is None
        for flag in ("--overwrite", "--resume"):
            code, _, err = torchsmith(run(ckpt, 4, flag, workload="mlp"), tmp_path)
            said = one_line_error(err)
            assert code == 2 and f"is in use by another live run (pid {writer.pid} on" in said, said
        writer.send_signal(signal.SIGTERM)
        code, _, err = finish(writer)
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
    assert code == 143, err[-3000:]
    saved = list_checkpoints(ckpt)
    assert saved and all(load_checkpoint(p)["run_id"] for p in saved)  # each verifies against its SHA-256
    # The lock went with its holder: now --overwrite may start over.
    code, out, err = torchsmith(run(ckpt, 2, "--overwrite", workload="mlp"), tmp_path)
    assert code == 0, err[-3000:]
    assert [p.name for p in list_checkpoints(ckpt)] == ["step_00000002.pt"]


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs at tmp_path/m, unmounted afterwards; skipped where this process cannot mount."""
    mnt = tmp_path / "m"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_disk_full_x_manifest_write_fails_in_one_line_and_resume_continues(tmp_path, tmpfs):
    ckpt = tmpfs / "c"
    code, _, err = torchsmith(run(ckpt, 2), tmp_path)
    assert code == 0, err[-3000:]
    first = ckpt / "step_00000002.pt"
    size = first.stat().st_size  # step 4's file has the same layout, so the same size
    page = os.statvfs(tmpfs).f_frsize
    # Leave room for exactly the step-4 file and not one page more: its manifest cannot be written.
    (tmpfs / "filler").write_bytes(b"\0" * (free_bytes(tmpfs) - -(-size // page) * page))
    code, _, err = torchsmith(run(ckpt, 4, "--resume"), tmp_path)
    said = one_line_error(err)
    assert code == 2, said
    assert f"could not write the manifest of checkpoint {ckpt / 'step_00000004.pt'}: the disk is full" in said, said
    assert [p.name for p in list_checkpoints(ckpt)] == ["step_00000002.pt"]  # the unverifiable .pt is gone
    assert not [p for p in ckpt.iterdir() if p.name.endswith(".tmp")]
    load_checkpoint(first)  # still verifies
    (tmpfs / "filler").unlink()
    code, out, err = torchsmith(run(ckpt, 4, "--resume"), tmp_path)
    assert code == 0, err[-3000:]
    code, ref, err = torchsmith(run(tmp_path / "ref", 4), tmp_path)
    assert code == 0, err[-3000:]
    resumed, ref = json.loads(out), json.loads(ref)
    assert resumed["start_step"] == 2 and resumed["losses"] == ref["losses"][2:]


def test_read_only_mount_x_resume_refuses_before_step_1_and_a_writable_copy_resumes(tmp_path, tmpfs):
    ckpt = tmpfs / "c"
    code, _, err = torchsmith(run(ckpt, 2), tmp_path)
    assert code == 0, err[-3000:]
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    done = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only: {done.stderr.strip()}")
    code, out, err = torchsmith(run(ckpt, 4, "--resume"), tmp_path)
    said = one_line_error(err)
    assert code == 2 and out == "", said
    assert f"--checkpoint-dir {ckpt} is not writable: Read-only file system" in said and "before step 1" in said
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
    copy = tmp_path / "copy"
    shutil.copytree(ckpt, copy)
    code, out, err = torchsmith(run(copy, 4, "--resume"), tmp_path)
    assert code == 0, err[-3000:]
    code, ref, err = torchsmith(run(tmp_path / "ref", 4), tmp_path)
    assert code == 0, err[-3000:]
    resumed, ref = json.loads(out), json.loads(ref)
    assert resumed["start_step"] == 2 and resumed["losses"] == ref["losses"][2:]
