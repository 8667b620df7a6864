import sys
import textwrap

import pytest

from torchsmith.workload import Workload, WorkloadError, load_workload

WORKLOAD_SRC = textwrap.dedent("""
    import torch
    from torchsmith import Workload

    def workload():
        x = torch.randn(64, 4)
        return Workload(model=lambda: torch.nn.Linear(4, 1), batches=[(x, x.sum(1, keepdim=True))],
                        loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
                        optimizer=lambda p: torch.optim.SGD(p, lr=0.1))

    def not_a_workload():
        return 42
""")


@pytest.mark.parametrize("name", ["gpt-mini", "cnn-mini", "mlp"])
def test_builtin_names(name):
    assert load_workload(name).name == name


def test_default_is_gpt_mini():
    assert load_workload(None).name == "gpt-mini"


def test_file_path_spec(tmp_path):
    path = tmp_path / "my_work.py"
    path.write_text(WORKLOAD_SRC)
    w = load_workload(f"{path}:workload")
    assert isinstance(w, Workload) and w.name == f"{path}:workload"


def test_module_spec(tmp_path, monkeypatch):
    (tmp_path / "my_pkg_mod.py").write_text(WORKLOAD_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_workload("my_pkg_mod:workload"), Workload)
    sys.modules.pop("my_pkg_mod", None)


@pytest.mark.parametrize("spec, message", [
    ("gpt-large", "neither a built-in name (gpt-mini, cnn-mini, mlp, hf-gpt2, hf-llama, hf-vit, hf-resnet)"),
    ("no_such_module_xyz:workload", "no module named 'no_such_module_xyz'"),
    ("/nonexistent/file.py:workload", "does not exist"),
])
def test_bad_specs_get_one_clear_error(spec, message):
    with pytest.raises(WorkloadError) as err:
        load_workload(spec)
    assert message in str(err.value)


def test_missing_attribute_and_wrong_return_type(tmp_path):
    path = tmp_path / "w2.py"
    path.write_text(WORKLOAD_SRC)
    with pytest.raises(WorkloadError, match="has no attribute 'nope'.*workload"):
        load_workload(f"{path}:nope")
    with pytest.raises(WorkloadError, match="returned int, expected torchsmith.Workload"):
        load_workload(f"{path}:not_a_workload")
