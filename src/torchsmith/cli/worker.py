"""The entry point torchrun starts in each worker: the torchsmith command line under ``@record``.

``@record`` writes an uncaught exception to torchrun's error file, so when a worker fails the
launcher's summary names the rank and the original exception with its traceback, instead of
only an exit code. A command that succeeded ends the process group cleanly before exiting.
"""

from __future__ import annotations

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    from torchsmith.cli import app
    from torchsmith.distributed.runtime import shutdown

    try:
        app()  # typer ends with SystemExit, 0 on success
    except SystemExit as done:
        if done.code in (0, None):
            shutdown()
        raise
    shutdown()


if __name__ == "__main__":
    main()
