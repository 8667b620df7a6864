"""nanoGPT's data path: a uint16 token file read through np.memmap, random windows per batch.

``prepare()`` writes train.bin from the character corpus that ships with torchsmith (or random
tokens when it is not importable), so the example runs offline."""

import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def prepare(path=os.path.join(HERE, "train.bin"), n_tokens=200_000):
    if os.path.exists(path):
        return path
    try:
        from torchsmith.workloads.gpt_mini import load_corpus  # the shipped corpus, when importable

        tokens = np.frombuffer(load_corpus().encode("utf-8", errors="ignore"), dtype=np.uint8).astype(np.uint16)
    except Exception:
        tokens = np.random.default_rng(0).integers(0, 256, n_tokens, dtype=np.uint16)
    tmp = path + ".tmp"
    tokens.tofile(tmp)
    os.replace(tmp, path)
    return path


def get_batch(path, block_size, batch_size):
    # A fresh memmap per batch, as nanoGPT does, to avoid its memory leak.
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x, y
