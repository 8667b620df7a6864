"""``inspect_workload``: parameters, FLOPs and saved-for-backward bytes per module, and a
training-memory estimate checked against the measured peak.

Everything is measured on one real batch of the workload, never derived from formulas
over the architecture: FLOPs with ``FlopCounterMode`` (:mod:`torchsmith.measure.flops`),
saved bytes with ``saved_tensors_hooks`` (:mod:`torchsmith.measure.saved`), peak memory
with the allocator (:mod:`torchsmith.measure.memory`).

Example::

    result = inspect_workload(load_workload("mlp"))
    result.memory.estimate_bytes, result.memory.measured_peak_bytes
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import torch
from torch import nn

from torchsmith.batch import to_device
from torchsmith.engine.loop import build_step, resolve_device
from torchsmith.inspect.graph import GraphInfo, capture_inputs, trace_shapes
from torchsmith.measure.flops import count_flops
from torchsmith.measure.memory import memory_split, tensor_bytes, track_peak_memory
from torchsmith.measure.saved import OUTSIDE_MODULES, count_saved_tensors
from torchsmith.plan import Plan
from torchsmith.structure import discover
from torchsmith.workload import Workload, check_scalar_loss


@dataclass(frozen=True)
class ModuleRow:
    """One module. Every figure includes the module's submodules."""

    path: str
    """``named_modules`` path; ``""`` is the whole model."""
    type: str
    depth: int
    params: int
    forward_flops: int
    backward_flops: int
    saved_bytes: int
    """Activation bytes its ops saved for backward (unique storages, parameters excluded)."""
    output_shape: str | None


@dataclass(frozen=True)
class MemoryEstimate:
    """Training memory as the sum of its parts, against the peak measured over a real step."""

    parameters: int
    """Parameters and buffers."""
    gradients: int
    """One gradient per trainable parameter, in its dtype."""
    optimizer_state: int
    """Tensors in ``optimizer.state`` after one step (Adam: two moments per parameter)."""
    activations: int
    """Bytes saved for backward by one forward pass (the batch's activations)."""
    measured_peak: int
    """Peak live bytes over one steady-state training step (the second one)."""
    method: str
    """How the peak was measured (``measure.memory``)."""

    @property
    def estimate(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    @property
    def peak_over_estimate(self) -> float:
        return self.measured_peak / self.estimate if self.estimate else float("nan")


@dataclass(frozen=True)
class InspectResult:
    workload: str
    device: str
    params: int
    trainable_params: int
    forward_flops: int
    backward_flops: int
    saved_bytes: int
    saved_outside_modules: int
    """Saved bytes of ops outside any module (the loss on the model's output)."""
    modules: list[ModuleRow]
    graph: GraphInfo
    memory: MemoryEstimate
    blocks_path: str | None = None
    """Where the repeated blocks are (``torchsmith.structure.discover``); their rows are kept at any depth."""


def inspect_workload(workload: Workload, *, device: str | torch.device | None = None,
                     depth: int | None = 3) -> InspectResult:
    """Measure ``workload``'s model on its first batch; ``depth`` limits the module rows.

    >>> from torchsmith.workload import load_workload
    >>> r = inspect_workload(load_workload("mlp"))          # doctest: +SKIP
    >>> r.backward_flops == 2 * r.forward_flops             # doctest: +SKIP
    True
    """
    device = resolve_device(device)
    step = build_step(workload, Plan(), device)  # seeded: the same model every command sees
    model = step.model
    batches = [to_device(b, device) for b in islice(workload.iter_batches(), 2)]
    batch = batches[0]

    with torch.no_grad():  # a non-scalar loss is a one-line error, before tracing trips over it
        check_scalar_loss(workload.loss(model, batch))
    args, kwargs = capture_inputs(model, workload.loss, batch)
    graph = trace_shapes(model, args, kwargs)
    with torch.no_grad():  # forward FLOPs do not depend on autograd; no graph is needed
        fwd = count_flops(lambda: workload.loss(model, batch), model=model)
    saved_box = []

    def forward_backward() -> None:
        with count_saved_tensors(model) as saved:
            loss = workload.loss(model, batch)
        check_scalar_loss(loss)
        saved_box.append(saved)
        loss.backward()

    total = count_flops(forward_backward, model=model)
    saved = saved_box[0].result
    model.zero_grad(set_to_none=True)

    memory = _memory(step, batches, saved.bytes, device)
    found = discover(model)
    # The per-block table: the blocks' container counts as depth 1 and each block as depth 2,
    # wherever they sit (ViT's `vit.layers.0` is 3 levels down, a ResNet stage 4).
    keep: dict[str, int] = {}
    if found.blocks is not None:
        assert found.blocks_path is not None  # discover sets blocks and blocks_path together
        keep = {found.blocks_path: 1, **{p: 2 for p, _ in found.block_items("inspect")}}
    rows = _rows(model, fwd.by_module, total.by_module, saved.by_module or {}, graph.module_shapes, depth, keep)
    params = sum(p.numel() for p in model.parameters())
    return InspectResult(
        workload=workload.name, device=str(device), params=params,
        trainable_params=sum(p.numel() for p in model.parameters() if p.requires_grad),
        forward_flops=fwd.total, backward_flops=total.backward, saved_bytes=saved.bytes,
        saved_outside_modules=(saved.by_module or {}).get(OUTSIDE_MODULES, 0),
        modules=rows, graph=graph, memory=memory, blocks_path=found.blocks_path,
    )


def _memory(step, batches: list, activations: int, device: torch.device) -> MemoryEstimate:
    model, optimizer = step.model, step.optimizer
    trainable = [p for p in model.parameters() if p.requires_grad]
    step(batches[0])  # the first step creates the optimizer state: the second is steady state
    split = memory_split(model, optimizer)
    batch = batches[-1]
    with torch.random.fork_rng(devices=[]):
        with track_peak_memory(device, live=(model, optimizer, batch)) as mem:
            step(batch)
    return MemoryEstimate(
        parameters=split.params, gradients=tensor_bytes(trainable),  # a grad has its parameter's size
        optimizer_state=split.optimizer_state, activations=activations,
        measured_peak=mem.result.peak_bytes, method=mem.result.method,
    )


def _inclusive(by_module: dict[str, int], path: str) -> int:
    """Sum over ``path`` and its submodules of per-innermost-module figures."""
    if path == "":
        return sum(v for k, v in by_module.items() if k != OUTSIDE_MODULES)
    return sum(v for k, v in by_module.items() if k == path or k.startswith(path + "."))


def _rows(model: nn.Module, fwd: dict[str, int], total: dict[str, int], saved: dict[str, int],
          shapes: dict[str, str], depth: int | None, keep: dict[str, int] | None = None) -> list[ModuleRow]:
    rows = []
    keep = keep or {}
    for path, module in model.named_modules():
        d = 0 if path == "" else path.count(".") + 1
        if depth is not None and min(d, keep.get(path, d)) > depth:
            continue
        f, t = fwd.get(path, 0), total.get(path, 0)
        if isinstance(module, nn.ModuleList):  # never called itself: its blocks' sum
            prefix = f"{path}." if path else ""
            f = sum(fwd.get(f"{prefix}{name}", 0) for name, _ in module.named_children())
            t = sum(total.get(f"{prefix}{name}", 0) for name, _ in module.named_children())
        rows.append(ModuleRow(
            path=path, type=type(module).__name__, depth=d,
            params=sum(p.numel() for p in module.parameters()),
            forward_flops=f, backward_flops=max(0, t - f), saved_bytes=_inclusive(saved, path),
            output_shape=shapes.get(path),
        ))
    return rows
