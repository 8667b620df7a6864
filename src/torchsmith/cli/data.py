"""``torchsmith data pack|verify|tune``: packed memory-mapped datasets and measured loader tuning."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, cast

import typer

from torchsmith.cli import app
from torchsmith.cli.common import JsonOption, user_errors

data_app = typer.Typer(help="Packed memory-mapped datasets: pack a source, verify a store, tune the DataLoader.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("pack")
def pack_command(
    src: Path = typer.Argument(..., help="A folder of one-sample .npy files, an .npy array (N, ...), or a text file."),
    dest: Path = typer.Argument(..., help="The store directory to write."),
    tokenizer: str = typer.Option("bytes", "--tokenizer", help="Text sources: 'bytes' (UTF-8, vocab 256) or 'chars'."),
    seq_len: int = typer.Option(256, "--seq-len", min=1, help="Text sources: tokens per sample."),
    shard_mb: float = typer.Option(64.0, "--shard-mb", min=0.001, help="Shard size in MiB."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the shards of an existing store in DEST."),
) -> None:
    """Pack SRC into a store of fixed-size .npy shards plus index.json (atomic: no half store)."""
    from torchsmith.data.pack import Tokenizer, pack_source
    from torchsmith.report.console import console
    from torchsmith.report.data import render_pack, task_progress

    with user_errors():
        start = time.perf_counter()
        with task_progress("packing", console) as update:
            # cast: tokenize checks the name (an unknown one raises StoreError)
            index = pack_source(src, dest, tokenizer=cast(Tokenizer, tokenizer), seq_len=seq_len,
                                shard_bytes=int(shard_mb * 2**20), overwrite=overwrite,
                                progress=lambda done, total: update(done, total, "files"))
    render_pack(index, dest, time.perf_counter() - start, console)


@data_app.command("verify")
def verify_command(dest: Path = typer.Argument(..., help="The store directory.")) -> None:
    """Check every shard of DEST: present, full size, every block's checksum and header as the index says.
    Exit 1 on a problem."""
    from torchsmith.data.verify import verify_store
    from torchsmith.report.console import console
    from torchsmith.report.data import render_verify, task_progress

    with user_errors():
        with task_progress("verifying", console) as update:
            report = verify_store(dest, progress=lambda done, total: update(done, total, "files"))
    render_verify(report, console)
    if not report.ok:
        raise typer.Exit(1)


@data_app.command("upgrade")
def upgrade_command(
    dest: Path = typer.Argument(..., help="A store packed by torchsmith 0.1.0 (format 1)."),
    block_kb: int = typer.Option(1024, "--block-kb", min=4, help="Checksummed block size in KiB (a power of two)."),
) -> None:
    """Re-index a format-1 store in place with block checksums (each shard's SHA-256 checked first;
    the shards stay, index.json is replaced atomically)."""
    from torchsmith.data.upgrade import upgrade_store
    from torchsmith.report.console import console
    from torchsmith.report.data import render_upgrade, task_progress

    with user_errors():
        with task_progress("upgrading", console) as update:
            result = upgrade_store(dest, block_bytes=block_kb << 10,
                                   progress=lambda done, total: update(done, total, "files"))
    render_upgrade(result, console)


@data_app.command("tune")
def tune_command(
    target: str = typer.Argument(..., help="A store directory, or a workload with a loader factory (e.g. cnn-mini)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1, help="Samples per batch (stores; required)."),
    plan: Optional[Path] = typer.Option(None, "--plan",
                                        help="Plan to update; default: --out if it exists, else as written."),
    out: Path = typer.Option(Path("plan.json"), "--out", help="Where to write the plan with the recommended loader."),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the plan (default) or only print."),
    batches: int = typer.Option(10, "--batches", min=1, help="Batches per timed pass."),
    passes: int = typer.Option(2, "--passes", min=1, help="Timed passes (fresh iterators) per measurement."),
    rounds: int = typer.Option(2, "--rounds", min=1, help="Interleaved repetitions per candidate; the median is kept."),
    worker_threads: int = typer.Option(1, "--worker-threads", min=1, help="torch threads inside each worker (stores)."),
    as_json: JsonOption = False,
) -> None:
    """Measure loader throughput across workers, prefetch, persistence, batch fetch and pinning;
    recommend the fastest."""
    from torchsmith.data.loader import LoaderArgs
    from torchsmith.data.loader_tune import tune_loader
    from torchsmith.plan import Plan
    from torchsmith.report.console import console
    from torchsmith.report.data import render_tune, task_progress

    with user_errors():
        factory, per_batch, written, batch_fetch = _target(target, batch_size,
                                                           LoaderArgs(worker_threads=worker_threads))
        with task_progress("measuring loaders", console, quiet=as_json) as update:
            result = tune_loader(factory, samples_per_batch=per_batch, written=written, batches=batches, passes=passes,
                                 rounds=rounds, try_batch_fetch=batch_fetch, progress=update)
        written_to = None
        if write:
            base = Plan.load(plan) if plan else (Plan.load(out) if out.exists() else Plan())
            written_to = base.replace(loader=result.recommended).save(out)
    if as_json:
        rows = [{"stage": t.stage, **vars(t.args), "samples_per_s": t.samples_per_s} for t in result.trials]
        typer.echo(json.dumps({"trials": rows, "recommended": vars(result.recommended), "speedup": result.speedup,
                               "plan": str(written_to) if written_to else None}, indent=2))
    else:
        render_tune(result, console, written_to)


def _target(target: str, batch_size: int | None, written):
    """(factory, samples per batch, loader as written, whether batch fetch is worth trying)."""
    from torchsmith.data.loader import make_loader
    from torchsmith.data.mmap_dataset import MmapDataset
    from torchsmith.workload import load_workload

    path = Path(target)
    if path.is_dir():
        if batch_size is None:
            raise ValueError(f"tuning the store {target} needs a batch size.\nTip: pass --batch-size 64 "
                             "(the batch size your training uses).")
        ds = MmapDataset(path)
        return (lambda cfg: make_loader(ds, cfg, batch_size=batch_size, written=written)), batch_size, written, True
    w = load_workload(target)
    if w.loader is None:
        raise ValueError(f"workload {w.name!r} has no loader factory, so its loader cannot be rebuilt.\n"
                         "Tip: give Workload(loader=lambda cfg: "
                         "torchsmith.data.loader.make_loader(dataset, cfg, ...)), "
                         "or tune a packed store: torchsmith data tune STORE --batch-size B")
    per_batch = w.samples_per_batch or 1
    if batch_size is not None and batch_size != per_batch:
        raise ValueError(f"--batch-size {batch_size} does not apply to workload {w.name!r}: its loader makes batches "
                         f"of {per_batch}.\nTip: drop --batch-size.")
    as_written = getattr(w.loader, "written", written)
    return w.loader, per_batch, as_written, hasattr(getattr(w.loader, "dataset", None), "get_batch")
