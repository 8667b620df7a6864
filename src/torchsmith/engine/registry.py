"""Every knob the engine applies, listed once and explicitly.

``tune`` builds its search space from this list, ``bench tips`` measures it, and the docs
describe it. A transform joins by defining ``INFO`` in its module and appearing here; nothing
is registered as a side effect of an import.

>>> sorted(registered_transforms())[:3]
['checkpointing', 'compile', 'inplace']
"""

from __future__ import annotations

from torchsmith.distributed import strategy
from torchsmith.transforms import (
    activation_checkpoint,
    compile,
    inplace,
    loader,
    loss_impl,
    memory_format,
    microbatching,
    optimizer_impl,
    precision,
    saved_tensors,
    threads,
)
from torchsmith.transforms.base import TransformInfo

TRANSFORMS: tuple[TransformInfo, ...] = (
    threads.INFO,
    precision.INFO,
    optimizer_impl.INFO,
    loader.INFO,
    loss_impl.INFO,
    inplace.INFO,
    memory_format.INFO,
    compile.INFO,
    activation_checkpoint.INFO,
    saved_tensors.INFO,
    microbatching.INFO,
    strategy.INFO,
)


def registered_transforms(extra: tuple[TransformInfo, ...] = ()) -> dict[str, TransformInfo]:
    """The transforms by name; ``extra`` adds entries (a transform of your own, or a test's)."""
    return {info.name: info for info in (*TRANSFORMS, *extra)}
