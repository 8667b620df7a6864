"""The fast tier stays fast: a test that starts a process or calls torch.compile must say so.

`make test-fast` runs ``-m "not slow and not multiprocess"``. A test that spawns a process (a
subprocess, a CliRunner command that spawns one, torchrun, multiprocessing, DataLoader workers)
or calls torch.compile costs seconds, so it must be marked ``slow``, and ``multiprocess`` too when
it has several child processes at once or runs torchrun. This guard watches every test (its
setup, call and teardown) and fails one not marked slow at teardown, naming what it started and
the markers to add. conftest.py imports these hooks.
"""

from __future__ import annotations

import dataclasses
import multiprocessing.process
import platform
import subprocess
import weakref

import pytest
import torch

TORCHRUN_WORDS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
"""A command naming one of these starts a torchrun agent, which starts the ranks itself."""


@dataclasses.dataclass
class _Seen:
    """What the running test started: one line per spawn or compile, and whether several ran at once."""

    starts: list[str] = dataclasses.field(default_factory=list)
    compiles: list[str] = dataclasses.field(default_factory=list)
    several: list[str] = dataclasses.field(default_factory=list)
    children: list[weakref.ref] = dataclasses.field(default_factory=list)


_current: _Seen | None = None


def _alive(child) -> bool:
    if isinstance(child, subprocess.Popen):
        return child.poll() is None
    return child.is_alive()


def _note_start(child, what: str, several_at_once: bool = False) -> None:
    seen = _current
    if seen is None:
        return
    running = [c for ref in seen.children if (c := ref()) is not None and c is not child and _alive(c)]
    seen.starts.append(what)
    if several_at_once or running:
        seen.several.append(what if several_at_once else f"{what} while {len(running)} other child process(es) ran")
    seen.children.append(weakref.ref(child))


def _describe_command(args) -> str:
    words = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    text = " ".join(words)
    return text if len(text) <= 160 else text[:157] + "..."


def _wrap_popen() -> None:
    original = subprocess.Popen.__init__

    def watched_init(self, args, *rest, **kwargs):
        original(self, args, *rest, **kwargs)
        text = _describe_command(args)
        _note_start(self, f"subprocess {text}", several_at_once=any(w in text for w in TORCHRUN_WORDS))

    subprocess.Popen.__init__ = watched_init  # type: ignore[method-assign]


def _wrap_process_start() -> None:
    original = multiprocessing.process.BaseProcess.start

    def start(self):
        target = getattr(self, "_target", None)  # start() drops it (bpo-30775)
        original(self)
        _note_start(self, f"multiprocessing process {self.name} running {getattr(target, '__qualname__', target)}")

    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]


def _wrap_compile() -> None:
    original = torch.compile

    def watched_compile(*args, **kwargs):
        if _current is not None:
            target = args[0] if args else kwargs.get("model")
            _current.compiles.append(f"torch.compile({getattr(target, '__qualname__', type(target).__name__)})")
        return original(*args, **kwargs)

    torch.compile = watched_compile  # type: ignore[assignment]


def pytest_configure(config: pytest.Config) -> None:
    # platform runs `uname -p` once per process and caches it: started here, it is charged to no
    # test (otherwise to whichever test happens to read the machine fingerprint first).
    platform.processor()
    # matplotlib builds its font cache on a machine's first import, running fc-list: done here, not
    # charged to the first test that draws a chart (on a fresh machine only, so it went unseen).
    import matplotlib.font_manager  # noqa: F401
    _wrap_popen()
    _wrap_process_start()
    _wrap_compile()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _current
    _current = _Seen()
    try:
        return (yield)
    finally:
        _current = None


def _missing_markers(item: pytest.Item, seen: _Seen) -> list[str]:
    """The markers to add, for a test not marked slow (what the fast tier selects on)."""
    if not (seen.starts or seen.compiles) or item.get_closest_marker("slow") is not None:
        return []
    missing = ["slow"]
    if seen.several and item.get_closest_marker("multiprocess") is None:
        missing.append("multiprocess")
    return missing


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    seen = _current
    if seen is None:
        return
    missing = _missing_markers(item, seen)
    if not missing:
        return
    lines = [*seen.compiles[:3], *seen.starts[:3], *seen.several[:2]]
    markers = " and ".join(f"@pytest.mark.{m}" for m in missing)
    pytest.fail(
        f"{item.nodeid} started {len(seen.starts)} process(es) and made {len(seen.compiles)} torch.compile call(s) "
        f"but is not marked {' and '.join(missing)}: the fast tier (make test-fast) would run it.\n  "
        + "\n  ".join(lines)
        + f"\nTip: add {markers} to the test (several processes at once or torchrun also need multiprocess).",
        pytrace=False,
    )
