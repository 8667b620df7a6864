"""The script side of ``torchsmith doctor -- python train.py``: hook this process at start-up.

``sitecustomize`` (``torchsmith/inject/_site/``) calls :func:`install_from_env` in every Python process
of the command. Each installs the capture hooks; the first process to finish an optimizer
step claims the capture with an exclusive file, so DataLoader workers and helper scripts
never profile. The window's trace and facts land in the directory the parent named.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

from torchsmith.inject.env import DOCTOR_ENV_KEY
from torchsmith.inject.gloo_exit import settle_at_exit
from torchsmith.profile.capture import CaptureConfig, StepCapture


def install_from_env() -> StepCapture | None:
    spec = os.environ.get(DOCTOR_ENV_KEY)
    if not spec:
        return None
    settle_at_exit()  # first, so it runs after every other exit handler (inject/gloo_exit.py)
    spec = json.loads(spec)
    out_dir = Path(spec["out_dir"])
    cfg = CaptureConfig(**spec["config"])

    def claim() -> bool:
        try:
            fd = os.open(out_dir / "claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True

    def on_done(capture: StepCapture) -> None:
        if cfg.stop_after:
            capture.facts.stopped = True
            (out_dir / "facts.json").write_text(capture.facts.to_json())
            raise SystemExit(0)  # unwinds the script's frames: its `finally` blocks still run

    capture = StepCapture(cfg, out_dir, claim=claim, on_done=on_done)
    capture.install()
    atexit.register(capture.finish)  # a script that ends inside the window keeps what was recorded
    return capture
