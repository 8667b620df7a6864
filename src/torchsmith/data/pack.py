"""Packing sources into a store: one-sample ``.npy`` files, an array of samples, text, byte strings.

Example::

    from torchsmith.data.pack import pack_source
    pack_source("corpus.txt", "store/", tokenizer="chars", seq_len=256)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from torchsmith.data.store import StoreError, StoreIndex, StoreWriter

Tokenizer = Literal["bytes", "chars"]


def pack_arrays(samples: np.ndarray, dest: str | os.PathLike, **kw: Any) -> StoreIndex:
    """Pack an array of fixed-shape samples ``(N, *shape)``."""
    samples = np.asarray(samples)
    if samples.ndim < 1 or samples.shape[0] == 0:
        raise StoreError(f"expected an array of samples (N, ...), found shape {samples.shape}.")
    with StoreWriter(dest, dtype=samples.dtype, shape=samples.shape[1:], **kw) as w:
        w.add_many(samples)
    return w.close()  # closed by the with block: returns its index


def pack_bytes(blobs: Iterable[bytes], dest: str | os.PathLike, **kw: Any) -> StoreIndex:
    """Pack variable-length byte strings (e.g. compressed images) as a ragged uint8 store."""
    with StoreWriter(dest, dtype=np.uint8, shape=None, **kw) as w:
        for blob in blobs:
            w.add(np.frombuffer(blob, dtype=np.uint8))
    return w.close()  # closed by the with block: returns its index


def pack_npy_folder(src: str | os.PathLike, dest: str | os.PathLike, *,
                    progress: Callable[[int, int], None] | None = None, **kw: Any) -> StoreIndex:
    """Pack a folder of ``.npy`` files, one sample each, in sorted file-name order."""
    files = sorted(Path(src).glob("*.npy"))
    if not files:
        raise StoreError(f"{src} holds no .npy files.\nTip: pass a folder of one-sample .npy files, "
                         "an .npy array of samples, or a text file.")
    first = _load_npy(files[0])
    meta = {"source": "npy-folder", "files": len(files), **kw.pop("meta", {})}
    with StoreWriter(dest, dtype=first.dtype, shape=first.shape, meta=meta, **kw) as w:
        for f in files:
            arr = _load_npy(f)
            if arr.shape != first.shape or arr.dtype != first.dtype:
                raise StoreError(f"{f} holds {arr.dtype}{list(arr.shape)}; {files[0].name} holds "
                                 f"{first.dtype}{list(first.shape)}. A store's samples share one dtype and shape.\n"
                                 "Tip: resize or cast the odd files, or pack them into a separate store.")
            w.add(arr)
            if progress and (w.count % 1000 == 0 or w.count == len(files)):
                progress(w.count, len(files))
    return w.close()  # closed by the with block: returns its index


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:  # object arrays need pickle, which is never allowed here
        raise StoreError(f"{path} cannot be read without unpickling ({err}).\n"
                         "Tip: save plain numeric arrays (np.save(..., allow_pickle=False)).") from None


def tokenize(text: str, tokenizer: Tokenizer) -> tuple[np.ndarray, dict[str, Any]]:
    """Token ids and what decoding needs: UTF-8 bytes (vocab 256) or sorted unique characters."""
    if tokenizer == "bytes":
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8), {"tokenizer": "bytes", "vocab_size": 256}
    if tokenizer == "chars":
        vocab = sorted(set(text))
        lookup = {c: i for i, c in enumerate(vocab)}
        dtype = np.uint8 if len(vocab) <= 256 else np.int16 if len(vocab) <= 32767 else np.int32
        ids = np.fromiter((lookup[c] for c in text), dtype=dtype, count=len(text))
        return ids, {"tokenizer": "chars", "vocab_size": len(vocab), "vocab": "".join(vocab)}
    raise StoreError(f"tokenizer {tokenizer!r} is unknown; choose 'bytes' or 'chars'.")


def pack_tokens(src: str | os.PathLike, dest: str | os.PathLike, *, tokenizer: Tokenizer = "bytes",
                seq_len: int = 256, **kw: Any) -> StoreIndex:
    """Pack a text file as non-overlapping windows of ``seq_len`` tokens (the tail is dropped)."""
    ids, meta = tokenize(Path(src).read_text(encoding="utf-8"), tokenizer)
    n = len(ids) // seq_len
    if n == 0:
        raise StoreError(f"{src} has {len(ids)} tokens, fewer than one window of seq_len={seq_len}.\n"
                         f"Tip: pass --seq-len {max(1, len(ids))} or less.")
    meta.update({"source": "tokens", "seq_len": seq_len, "tokens": int(n * seq_len),
                 "dropped_tail_tokens": int(len(ids) - n * seq_len)})
    return pack_arrays(ids[: n * seq_len].reshape(n, seq_len), dest, meta={**meta, **kw.pop("meta", {})}, **kw)


def pack_source(src: str | os.PathLike, dest: str | os.PathLike, *, tokenizer: Tokenizer = "bytes",
                seq_len: int = 256, progress: Callable[[int, int], None] | None = None, **kw: Any) -> StoreIndex:
    """Pack whatever ``src`` is: a folder of ``.npy`` files, one ``.npy`` array, or a text file."""
    src = Path(src)
    if src.is_dir():
        return pack_npy_folder(src, dest, progress=progress, **kw)
    if not src.is_file():
        raise StoreError(f"source {src} does not exist.")
    if src.suffix == ".npy":
        arr = _load_npy(src)
        return pack_arrays(arr, dest, meta={"source": "array", "file": src.name}, **kw)
    return pack_tokens(src, dest, tokenizer=tokenizer, seq_len=seq_len, **kw)


