"""The entry point torchrun starts in each worker: the torchsmith command line under ``@record``.

``@record`` writes an uncaught exception to torchrun's error file, so when a worker fails the
launcher's summary names the rank and the original exception with its traceback, instead of
only an exit code. A command that succeeded, or stopped on SIGTERM/SIGUSR1 after saving (exit
143/138), waits for every rank at a barrier and exits (``distributed.runtime.shutdown``).
"""

from __future__ import annotations

import signal

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    from torchsmith.cli import app
    from torchsmith.distributed.runtime import shutdown

    try:
        app()  # typer ends with SystemExit, 0 on success
    except SystemExit as done:
        # 143/138: every rank agreed to stop after the same step on SIGTERM/SIGUSR1 and saved it,
        # so all of them reach shutdown's barrier together, as on success.
        if done.code in (0, None, 128 + signal.SIGTERM, 128 + signal.SIGUSR1):
            shutdown(int(done.code or 0))
        raise
    shutdown(0)


if __name__ == "__main__":
    main()
