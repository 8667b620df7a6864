"""Start-up hook for an unmodified script (`torchsmith doctor|tune|run --plan|verify -- python script.py`):
this directory is put first on PYTHONPATH, so every Python process the command starts runs this
file before the script.

It does nothing unless one of the keys below is set. sys.argv is untouched: the script sees its
own arguments. A sitecustomize of the user's own, further down sys.path, still runs.
"""

import importlib
import os
import sys

# key -> (module, what failed, in words). Named, not imported here: this file is the start-up of a
# foreign process, not a module of the library, and the doctor's capture lives in `profile`.
_HOOKS = {
    "TORCHSMITH_DOCTOR": ("torchsmith.profile.capture_hook", "torchsmith doctor: could not hook this process"),
    "TORCHSMITH_PLAN": ("torchsmith.inject.plan_injection", "torchsmith: could not apply the plan in this process"),
}

for _key, (_module, _failed) in _HOOKS.items():
    if os.environ.get(_key):
        try:
            importlib.import_module(_module).install_from_env()
        except Exception as err:  # never break the user's script for our sake: it runs as written
            sys.stderr.write(f"{_failed} ({type(err).__name__}: {err})\n")


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin and \
            os.path.dirname(os.path.abspath(spec.origin)) != here:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
