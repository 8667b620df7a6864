"""Measure DataLoader throughput across loader arguments and recommend the fastest.

Throughput is samples/s over ``passes`` short epochs of ``batches`` batches each, after a
warm-up pass. Each pass starts a fresh iterator, so the worker start-up that a real epoch
pays is counted, and ``persistent_workers`` shows its worth. Candidates are measured
round-robin (A B C A B C) and the median rate kept, so machine noise hits all alike.

The search is coordinate descent: first the number of workers, then, from the best, each
of prefetch depth, persistent workers, batch fetch and (CUDA only) pinned memory, keeping a
change only when it is faster by more than ``min_gain``. A recommendation that does not beat
the loader as written by ``min_gain`` is the loader as written.

Example::

    result = tune_loader(lambda cfg: make_loader(MmapDataset("store/"), cfg, batch_size=64),
                         samples_per_batch=64)
    result.recommended          # a LoaderConfig for Plan(loader=...)
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from torchsmith.data.loader import LoaderArgs
from torchsmith.measure.fingerprint import usable_cores
from torchsmith.plan import LoaderConfig

Factory = Callable[[LoaderConfig], Iterable[Any]]


@dataclass(frozen=True)
class LoaderTrial:
    args: LoaderArgs
    samples_per_s: float
    """Median over rounds."""
    rates: tuple[float, ...]
    stage: str


@dataclass
class LoaderTuneResult:
    written: LoaderArgs
    trials: list[LoaderTrial]
    samples_per_batch: int
    batches: int
    passes: int
    cores: int
    device: str
    min_gain: float
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> LoaderTrial:
        return next(t for t in self.trials if t.args == self.written)

    @property
    def best(self) -> LoaderTrial:
        best = max(self.trials, key=lambda t: t.samples_per_s)
        return best if best.samples_per_s > self.baseline.samples_per_s * (1 + self.min_gain) else self.baseline

    @property
    def speedup(self) -> float:
        return self.best.samples_per_s / self.baseline.samples_per_s

    @property
    def recommended(self) -> LoaderConfig:
        """The plan's loader section: the best arguments, or all None (as written) if none beat it."""
        best = self.best
        return LoaderConfig() if best is self.baseline else best.args.as_config()




def measure_loader(factory: Factory, args: LoaderArgs, *, samples_per_batch: int, batches: int = 10,
                   passes: int = 2, warmup: bool = True) -> float:
    """Samples/s of ``factory(args)`` over ``passes`` fresh iterations of up to ``batches`` batches."""
    loader = factory(args.as_config())
    try:
        if warmup:  # starts workers, maps shards, verifies checksums, fills the page cache
            _drain(loader, 0, batches)
        count, start = 0, time.perf_counter()
        for p in range(passes):
            count += _drain(loader, p + 1, batches)
        seconds = time.perf_counter() - start
    finally:
        if hasattr(loader, "close"):
            loader.close()
    return count * samples_per_batch / seconds if seconds > 0 else float("inf")


def _drain(loader: Any, epoch: int, batches: int) -> int:
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    if hasattr(loader, "set_limit"):
        loader.set_limit(batches)  # a short but complete epoch: no prefetched work is thrown away
    n = 0
    it = iter(loader)
    for _ in zip(range(batches), it, strict=False):
        n += 1
    if hasattr(it, "close"):
        it.close()  # a generator over a DataLoader: let it drop its iterator now
    return n


def tune_loader(factory: Factory, *, samples_per_batch: int, written: LoaderArgs = LoaderArgs(),
                batches: int = 10, passes: int = 2, rounds: int = 2, min_gain: float = 0.05,
                try_batch_fetch: bool = True, worker_counts: list[int] | None = None,
                progress: Callable[[int, int, str], None] | None = None) -> LoaderTuneResult:
    """Coordinate-descent search of loader arguments; see the module docstring."""
    written = written.effective()
    cores = usable_cores()
    cuda = torch.cuda.is_available()
    result = LoaderTuneResult(written=written, trials=[], samples_per_batch=samples_per_batch, batches=batches,
                              passes=passes, cores=cores, device="cuda" if cuda else "cpu", min_gain=min_gain)
    counts = worker_counts or sorted({0, 1, 2, max(1, cores // 2), cores} | {written.num_workers})
    stages: list[tuple[str, Callable[[LoaderArgs], list[LoaderArgs]]]] = [
        # Workers compared in steady state (persistent): start-up is judged in its own stage.
        ("num_workers", lambda a: [dataclasses.replace(a, num_workers=n,
                                                       persistent_workers=n > 0 or a.persistent_workers)
                                   for n in counts]),
        ("prefetch_factor", lambda a: [dataclasses.replace(a, prefetch_factor=f) for f in (2, 4, 8)]
         if a.num_workers else []),
        ("persistent_workers", lambda a: [dataclasses.replace(a, persistent_workers=p) for p in (False, True)]
         if a.num_workers else []),
    ]
    if try_batch_fetch:
        stages.append(("batch_fetch", lambda a: [dataclasses.replace(a, batch_fetch=b) for b in (False, True)]))
    if cuda:
        stages.append(("pin_memory", lambda a: [dataclasses.replace(a, pin_memory=p) for p in (False, True)]))
    else:
        result.notes.append("pin_memory not tried: it only matters for copies to a CUDA device.")
    planned = len(counts) + (3 + 2 + 2 * try_batch_fetch + 2 * cuda)  # progress total, an upper bound
    measured: dict[LoaderArgs, LoaderTrial] = {}
    current = written
    for stage, propose in stages:
        options = [a.effective() if a.num_workers == 0 else a for a in propose(current)]
        options = list(dict.fromkeys(options))  # keeps order, drops duplicates
        if not options:
            continue
        fresh = [a for a in options if a not in measured]
        rates: dict[LoaderArgs, list[float]] = {a: [] for a in fresh}
        for _ in range(rounds):
            for a in fresh:
                rates[a].append(measure_loader(factory, a, samples_per_batch=samples_per_batch,
                                               batches=batches, passes=passes))
        for a in fresh:
            measured[a] = LoaderTrial(a, statistics.median(rates[a]), tuple(rates[a]), stage)
            result.trials.append(measured[a])
            if progress:
                progress(len(result.trials), max(planned, len(result.trials)), stage)
        best = max((measured[a] for a in options), key=lambda t: t.samples_per_s)
        base = measured.get(current)
        if base is None or best.samples_per_s > base.samples_per_s * (1 + min_gain):
            current = best.args  # keep a change only when it beats noise
    if written not in measured:  # the as-written loader is always a row of the table
        rate = measure_loader(factory, written, samples_per_batch=samples_per_batch, batches=batches, passes=passes)
        result.trials.insert(0, LoaderTrial(written, rate, (rate,), "as written"))
    return result
