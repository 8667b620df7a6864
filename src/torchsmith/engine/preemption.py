"""Preemption: SIGTERM or SIGUSR1 ends training after the current step, with a checkpoint of it.

SIGTERM is what spot-instance preemption, Kubernetes eviction, SLURM and torchrun's scale-down
send (SLURM can also send SIGUSR1 ahead of time: ``#SBATCH --signal=USR1@60``). The handler
only records the signal: a step is never cut in half. The loop reads the flag once per step,
after the step and its periodic checkpoint (:meth:`Preemption.stop_signal`); then ``run`` saves
that step atomically, logs one line naming the file, and raises :class:`Preempted`, whose
``exit_code`` is the shell's convention for the signal (143 for SIGTERM, 138 for SIGUSR1).

Under torchrun the signal may reach the ranks in different steps: each step every rank
all-reduces the signal it saw (MAX, one element), so all ranks stop after the same step and save
it together (DCP). The flag is a CPU tensor, agreed over a gloo group (``DistSession.host_group``):
on NCCL a GPU tensor read back with ``.item()`` would make the CPU wait for the step's kernels.

The handlers are installed only while a run with a checkpoint directory trains, from the main
thread; without a checkpoint directory there is nothing to save and the signal acts as usual.

Example::

    with preemption_handler(enabled=True) as preemption:
        for step in ...:
            ...
            if preemption.stop_signal(distributed):
                ...  # save, then raise Preempted
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@dataclass
class Preemption:
    enabled: bool = True
    """False: no handler was installed (no checkpoint directory), so there is nothing to agree on."""
    received: int = 0
    """The first stop signal this process received (0: none yet)."""

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = self.received or signum  # a second signal changes nothing: the save is under way

    def stop_signal(self, distributed: Any = None) -> int:
        """The signal to stop on after this step, the same on every rank; 0 to go on."""
        if distributed is None or not self.enabled:  # every rank has the same config: all skip the all-reduce
            return self.received
        import torch
        import torch.distributed as dist

        # A CPU tensor over the host's gloo group: reading it waits for no GPU work.
        seen = torch.tensor([self.received], dtype=torch.int32)
        dist.all_reduce(seen, op=dist.ReduceOp.MAX, group=distributed.host_group)  # every rank, every step
        return int(seen.item())


class Preempted(Exception):  # noqa: N818  (not an error: a stop on request, after saving)
    """Training stopped on a signal after saving a checkpoint of the last finished step."""

    def __init__(self, signum: int, step: int, checkpoint: Path, result: Any):
        self.signum, self.step, self.checkpoint, self.result = signum, step, checkpoint, result
        self.exit_code = 128 + signum
        super().__init__(f"{signal.Signals(signum).name}: stopped after step {step} and saved {checkpoint}; "
                         f"exit {self.exit_code}. Resume with --resume and the same --checkpoint-dir.")


@contextmanager
def preemption_handler(enabled: bool, redeliver_on_error: bool = False) -> Iterator[Preemption]:
    """Record SIGTERM and SIGUSR1 for the block (main thread only), then restore the previous handlers.

    ``redeliver_on_error``: when the block fails after a stop signal arrived (no save was possible),
    the signal is sent again under the restored handler, so the process ends as the sender
    meant. Under torchrun this matters: after one rank dies the agent SIGTERMs the others, whose
    next collective then fails; they must die by that SIGTERM as before, not linger writing
    error reports while the agent restarts the group.
    """
    preemption = Preemption(enabled=enabled)
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield preemption  # signal.signal works only in the main thread; elsewhere signals act as usual
        return
    previous = {s: signal.signal(s, preemption._handle) for s in STOP_SIGNALS}
    try:
        yield preemption
    except BaseException:
        _restore(previous)
        if redeliver_on_error and preemption.received:
            os.kill(os.getpid(), preemption.received)
        raise
    finally:
        _restore(previous)


def _restore(previous: dict[signal.Signals, Any]) -> None:
    for s, handler in previous.items():
        signal.signal(s, handler)
