"""Every listed user error is one line naming the cause (file, flag), never a traceback."""

import os
import socket

import pytest
import torch
from fault_helpers import ANSI, cli, one_line_error, write_workload_file

from terminal_text import unwrapped

NONSCALAR = """
import torch, torchsmith
def workload():
    xs, ys = torch.randn(32, 4), torch.randn(32, 1)
    return torchsmith.Workload(model=lambda: torch.nn.Linear(4, 1), batches=[(xs, ys)],
                               loss=lambda m, b: (m(b[0]) - b[1]) ** 2,
                               optimizer=lambda p: torch.optim.SGD(p, lr=0.1), samples_per_batch=32)
"""


def test_workload_file_with_a_syntax_error(tmp_path):
    spec = write_workload_file(tmp_path / "broken.py", "def workload(:\n    pass\n")
    code, _, err = cli("run", spec, "--steps", "1")
    assert code == 2 and "broken.py:1: syntax error" in one_line_error(err)


def test_workload_factory_that_raises(tmp_path):
    spec = write_workload_file(tmp_path / "raises.py", "def workload():\n    raise RuntimeError('no data here')\n")
    code, _, err = cli("run", spec, "--steps", "1")
    assert code == 2 and "workload() raised RuntimeError: no data here (at " in one_line_error(err)
    assert "raises.py:2" in err


def test_plan_pointing_to_a_directory(tmp_path):
    code, _, err = cli("run", "mlp", "--steps", "1", "--plan", tmp_path)
    assert code == 2 and f"plan file '{tmp_path}' is a directory" in one_line_error(err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_on_a_cpu_build():
    code, _, err = cli("run", "mlp", "--steps", "1", "--device", "cuda")
    assert code == 2 and "--device cuda:" in one_line_error(err) and "--device cpu" in err


@pytest.mark.parametrize("command", ["run", "doctor", "inspect"])
def test_nonscalar_loss(tmp_path, command):
    spec = write_workload_file(tmp_path / "nonscalar.py", NONSCALAR)
    extra = ["--steps", "2"] if command != "inspect" else []
    code, _, err = cli(command, spec, *extra)
    assert code == 2 and "returned a tensor of shape (32, 1); expected a scalar" in one_line_error(err)


def test_refused_pickle_message_names_the_file_and_has_no_ansi(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    from torchsmith.engine.manifest import write_manifest

    path = tmp_path / "ck" / "step_00000001.pt"
    path.parent.mkdir()
    torch.save({"format_version": 1, "step": 1, "model": Payload()}, path)
    write_manifest(path, 1, "x")
    code, _, err = cli("run", "mlp", "--steps", "2", "--checkpoint-dir", path.parent, "--resume")
    assert code == 2 and "step_00000001.pt" in one_line_error(err) and "never unpickles" in err
    assert not ANSI.search(err) and not (tmp_path / "pwned").exists()


def test_version():
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("torchsmith ") and f"torch {torch.__version__}" in out


@pytest.mark.slow
def test_rich_markup_is_never_printed_raw(tmp_path):
    code, _, err = cli("doctor", "--", "python", str(tmp_path / "missing_script.py"))
    assert code != 0 and "[bold" not in err and "[/]" not in err
    code, _, err = cli("run", "mlp", "--steps", "1", "--plan", tmp_path / "nope[red].json")
    assert "[/]" not in err and "nope[red].json" in err  # a bracket in a user path is shown, not parsed


def test_help_shows_the_extra_in_brackets():
    code, out, _ = cli("tune", "--help")
    assert code == 0 and "torchsmith[hf]" in out  # rich would read a bare [hf] as a style tag


def test_launch_nnodes_abc_blames_nnodes():
    code, _, err = cli("launch", "--nnodes", "abc", "--dry-run", "--", "run", "mlp")
    assert code == 2 and one_line_error(err).startswith("error: --nnodes 'abc' is not a node count")
    assert "--rdzv-endpoint" not in err.splitlines()[0]


def test_launch_on_a_busy_rendezvous_port_fails_within_seconds():
    import time

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.perf_counter()
        code, _, err = cli("launch", "--rdzv-endpoint", f"127.0.0.1:{port}", "--", "run", "mlp", "--steps", "1")
        assert time.perf_counter() - start < 5
    assert code == 2 and f"port {port} on this machine is already in use" in one_line_error(err)


@pytest.mark.slow
def test_tune_budget_too_small_states_one_minimum():
    import re

    code, _, err = cli("tune", "mlp", "--budget", "0.01s", "--report", "", "--out", os.devnull)
    text = unwrapped(err)
    assert code == 2 and "Traceback" not in err
    need = re.search(r"need about (\d+) s in all", text)
    assert need and f"pass --budget {need.group(1)}s or more" in text, text


@pytest.mark.slow
@pytest.mark.parametrize("command", ["tune", "doctor"])
def test_a_python_without_torch_first_on_path_is_named(tmp_path, monkeypatch, command):
    # A real interpreter without torch (a bare venv), first on PATH: what a user gets from a
    # venv-installed torchsmith without activating the venv.
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bare' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    extra = ["--budget", "1m"] if command == "tune" else []
    code, _, err = cli(command, *extra, "--", "python", script)
    msg = one_line_error(err)
    assert code != 0 and "which cannot import torch; torchsmith runs in" in msg
    assert f"Tip: name that interpreter: -- {sys.executable} {script}" in msg
