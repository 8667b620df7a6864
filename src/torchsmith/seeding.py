"""Seeds and random-number-generator state: one definition for the whole package.

Three things need RNG state and must agree on what it is: a checkpoint (so a resumed run
draws the same dropout masks), the NaN sentinel's replay (so the re-run step is the step
that failed) and the side-by-side harness (so interleaved plans each keep their own
stream). Each of them uses :func:`rng_state` / :func:`set_rng_state`, which cover torch's
CPU generator, every CUDA device's generator, Python's ``random`` and numpy's legacy
global generator. The state is made of tensors and plain types only, so it survives
``torch.load(weights_only=True)``.

Example::

    state = rng_state()
    a = torch.rand(3)
    set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

_MASK64 = (1 << 64) - 1


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), Python's ``random`` and numpy's global RNG."""
    torch.manual_seed(seed)  # also seeds every CUDA device
    random.seed(seed)
    np.random.seed(seed % 2**32)


def derive_seed(*parts: int) -> int:
    """A stable 63-bit seed from integer parts (splitmix64 mixing; no Python ``hash``).

    >>> derive_seed(0, 2, 1) == derive_seed(0, 2, 1) != derive_seed(0, 2, 2)
    True
    """
    h = 0x243F6A8885A308D3
    for part in parts:
        h = (h ^ (int(part) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        z = h
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        h = z ^ (z >> 31)
    # 63 bits: always a valid torch.Generator seed.
    return h >> 1


def torch_rng_state() -> dict[str, Any]:
    """torch's own generators: what a model's forward draws from (dropout, ``randn``). A
    microsecond on CPU (``benchmarks/rng_snapshot.py``), cheap enough to take every step.

    CUDA generators are included only once CUDA is initialised: reading them would
    otherwise initialise CUDA (seconds, and memory on every device) for nothing.
    """
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from (torch, Python's ``random``, numpy's global), as
    tensors and plain types (weights_only-safe): for checkpoints and replays of a whole step."""
    np_state = np.random.get_state(legacy=True)  # the default; numpy's stub types only legacy=False
    assert isinstance(np_state, tuple)  # the global RandomState is an MT19937: its legacy state is a tuple
    return {
        **torch_rng_state(),
        "python": _to_lists(random.getstate()),
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` or :func:`torch_rng_state` captured."""
    torch.set_rng_state(state["torch"])
    if "python" in state:
        random.setstate(_to_tuples(state["python"]))
    if "numpy" in state:
        np_state = state["numpy"]
        np.random.set_state(("MT19937", np_state["key"].numpy().astype(np.uint32), np_state["pos"],
                             np_state["has_gauss"], np_state["cached_gaussian"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_lists(value: Any) -> Any:
    return [_to_lists(v) for v in value] if isinstance(value, (tuple, list)) else value


def _to_tuples(value: Any) -> Any:
    return tuple(_to_tuples(v) for v in value) if isinstance(value, list) else value
