"""The house rules that a reader relies on, checked on the source itself (fast: nothing is imported).

- no module imports a private (``_underscore``) name or module from another package;
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "torchsmith"


def _package_of(path: Path) -> str:
    """``torchsmith.engine`` for src/torchsmith/engine/step.py, ``torchsmith.plan`` for plan.py; 'tests' for a test."""
    if SRC not in path.parents:
        return "tests"
    first = path.relative_to(SRC).with_suffix("").parts[0]
    return "torchsmith" if first == "__init__" else f"torchsmith.{first}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imported_privates(source: str, path: Path) -> list[str]:
    """``path:line: module: names`` for each import in ``source`` (the text of ``path``) of a private
    name or module from another package."""
    mine, found = _package_of(path), []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [a.name for a in node.names], []
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] != "torchsmith":
                continue
            bad = [p for p in parts[1:] if _private(p)] + [n for n in names if _private(n)]
            if bad and ".".join(parts[:2]) != mine:
                found.append(f"{path.name}:{node.lineno}: {module}: {', '.join(bad)}")
    return found


def test_no_module_imports_a_private_name_from_another_package():
    files = sorted(SRC.rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    found = [hit for path in files for hit in _imported_privates(path.read_text(), path)]
    assert not found, ("private names imported across packages (make the name public, or move the code "
                       "to the package that owns it):\n" + "\n".join(found))


def test_the_private_import_check_sees_one():
    cli_module, test_module = SRC / "cli" / "example.py", ROOT / "tests" / "test_example.py"  # paths only
    source = "from torchsmith.engine.step import _NULL_TIMER, Step\nimport torchsmith.workloads._batches\n"
    assert [h.split(": ", 1)[1] for h in _imported_privates(source, cli_module)] == [
        "torchsmith.engine.step: _NULL_TIMER", "torchsmith.workloads._batches: _batches"]
    assert _imported_privates("from torchsmith.cli.common import _x\n", cli_module) == []  # its own package
    assert _imported_privates("from torchsmith.cli.common import _x\n", test_module) != []  # a test: not src
