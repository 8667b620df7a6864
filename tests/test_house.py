"""The house rules that a reader relies on, checked on the source itself (fast: nothing is imported).

- no module imports a private (``_underscore``) name or module from another package;
- every package's ``__init__`` docstring has a ``Modules:`` map, one line per module, that names
  each module of the package and nothing that is not there;
- README.md's layer diagram says what the import-linter layers contract in pyproject.toml says.
"""

import ast
import re
import tomllib
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


def _module_map(docstring: str) -> list[str]:
    """The names of the ``Modules:`` section: the first word of each indented line under it."""
    lines = docstring.splitlines()
    if "Modules:" not in (line.strip() for line in lines):
        return []
    start = [line.strip() for line in lines].index("Modules:") + 1
    names = []
    for line in lines[start:]:
        if not line.startswith(" ") or not line.strip():
            break
        names.append(line.split()[0])
    return names


def _map_problems(package: Path, docstring: str | None) -> list[str]:
    """What ``package``'s module map misses or names that is not there."""
    modules = {f.stem for f in package.glob("*.py") if f.stem != "__init__"}
    modules |= {d.name for d in package.iterdir() if (d / "__init__.py").exists()}
    present = modules | {d.name for d in package.iterdir() if d.is_dir() and d.name != "__pycache__"}
    listed = _module_map(docstring or "")
    where = f"src/torchsmith/{package.name}/__init__.py"
    problems = [f"{where}: module {m!r} is missing from its Modules: map" for m in sorted(modules - set(listed))]
    problems += [f"{where}: its Modules: map names {m!r}, which is not in the package" for m in listed
                 if m not in present]
    return problems


def test_every_package_docstring_maps_every_module():
    packages = sorted(d for d in SRC.iterdir() if (d / "__init__.py").exists())
    problems = [p for pkg in packages
                for p in _map_problems(pkg, ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())))]
    assert not problems, "\n".join(problems) + "\nTip: one line per module under 'Modules:', as in tips/__init__.py."


def test_the_module_map_check_sees_a_missing_and_a_stale_module():
    doc = "What it is.\n\nModules:\n    analyse   the analysis\n    gone      renamed long ago\n"
    problems = _map_problems(SRC / "inspect", doc)
    where = "src/torchsmith/inspect/__init__.py"
    assert problems == [f"{where}: module 'graph' is missing from its Modules: map",
                        f"{where}: its Modules: map names 'gone', which is not in the package"]


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [layer.replace("torchsmith.", "") for layer in contract["layers"]]


def _readme_layers(readme: str) -> list[str]:
    """The layer column of the diagram under '## Layout and design': each line that starts unindented,
    up to its first gap of two spaces (indented lines continue the description)."""
    section = readme.split("## Layout and design", 1)[1]
    diagram = section.split("```", 2)[1]
    return [re.split(r"\s{2,}", line)[0].strip() for line in diagram.splitlines()
            if line.strip() and not line[0].isspace()]


def test_readme_diagram_is_the_layers_contract():
    readme = _readme_layers((ROOT / "README.md").read_text())
    assert readme == _contract_layers(), (
        "README.md's layer diagram and pyproject.toml's layers contract disagree:\n"
        f"  README:   {readme}\n  contract: {_contract_layers()}\nTip: change the diagram to match the contract.")


def test_the_diagram_check_reads_layers_and_skips_descriptions():
    readme = "## Layout and design\n\n```\ncli | integrations   the CLI\ntuner : tips\n      more words\n```\n"
    assert _readme_layers(readme) == ["cli | integrations", "tuner : tips"]
