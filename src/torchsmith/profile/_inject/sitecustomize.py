"""Start-up hook for `torchsmith doctor -- python script.py`: this directory is put first on
PYTHONPATH, so every Python process the command starts runs this file before the script.

It does nothing unless TORCHSMITH_DOCTOR is set. sys.argv is untouched: the script sees its
own arguments. A sitecustomize of the user's own, further down sys.path, still runs.
"""

import os
import sys

if os.environ.get("TORCHSMITH_DOCTOR"):
    try:
        from torchsmith.profile.inject import install_from_env

        install_from_env()
    except Exception as err:  # never break the user's script for the sake of the doctor
        sys.stderr.write(f"torchsmith doctor: could not hook this process ({type(err).__name__}: {err})\n")

if os.environ.get("TORCHSMITH_PLAN"):  # `torchsmith tune -- ...` / `torchsmith run --plan P -- ...`
    try:
        from torchsmith.profile.inject_plan import install_from_env as _install_plan

        _install_plan()
    except Exception as err:  # reported, and the script runs as written
        sys.stderr.write(f"torchsmith: could not apply the plan in this process ({type(err).__name__}: {err})\n")


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
