"""A torchrun worker's exit, kept from gloo's teardown race: a moment with the GIL released first.

A gloo process group frees each finished work object on its own worker thread, after the rank
that waited on it has moved on. Freeing it releases a Python object held in the work's captured
thread-local state, so that thread takes the GIL. When the script's last collective (the DDP
tutorial's ``dist.barrier()`` before ``destroy_process_group()``) returns just before the script
ends, the main thread can already be finalising the interpreter; a thread that asks for the GIL
then is made to exit, the exit unwinds through a ``noexcept`` destructor, and the process aborts
("terminate called without an active exception", exit -6), which torchrun counts as a failed
worker and answers by stopping the other ranks. The core of one such abort showed the worker
thread in ``~AsyncBarrierWork`` -> ``~ThreadLocalState`` -> ``gil_scoped_acquire`` while the
main thread was in ``Py_FinalizeEx``.

The tests' DDP tutorial script (``tests/scripts/ddp_loop.py``) aborted so in 4 of 40 two-rank
runs as written, and in 0 of 40 under ``run --plan`` with this settle (``benchmarks/
gloo_exit_aborts.py``, 95% intervals 4.0-23.1% and 0.0-8.8%). So every torchrun
worker the injection reaches sleeps 0.1 s at exit, after the script's own exit handlers: the GIL is
free while gloo's threads finish, and the process ends with the script's own exit status. It
narrows the race, it cannot close it (a thread not scheduled within 0.1 s still loses it).
Upstream: pytorch#179291 (an atexit ``destroy_process_group``, abandoned), pytorch#75097.
"""

from __future__ import annotations

import atexit
import os
import time

SETTLE_SECONDS = 0.1
"""How long the main thread gives gloo's threads, GIL released, before the interpreter finalises."""


def under_torchrun() -> bool:
    """True in a worker started by torchrun's elastic agent (it sets ``TORCHELASTIC_RUN_ID``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def settle_at_exit() -> None:
    """Register the settle as an exit handler. Handlers run last registered first, so register it
    before any other of the injection's: it then runs after them and after the script's own."""
    if under_torchrun():
        atexit.register(time.sleep, SETTLE_SECONDS)
