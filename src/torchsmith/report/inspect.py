"""Render an ``InspectResult``: the module table, the memory split against the measured peak."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import Console
from rich.table import Table

from torchsmith.inspect.analyse import InspectResult
from torchsmith.report.console import fmt_bytes


def fmt_count(n: float | None) -> str:
    """12_345_678 -> '12.35M'."""
    if n is None:
        return "-"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{suffix}"
    return f"{n:.0f}"


def inspect_to_dict(result: InspectResult) -> dict[str, Any]:
    m = result.memory
    return {
        "workload": result.workload,
        "device": result.device,
        "params": result.params,
        "trainable_params": result.trainable_params,
        "forward_flops": result.forward_flops,
        "backward_flops": result.backward_flops,
        "saved_bytes": result.saved_bytes,
        "saved_outside_modules": result.saved_outside_modules,
        "graph": {"method": result.graph.method, "note": result.graph.note,
                  "nodes": [dataclasses.asdict(n) for n in result.graph.nodes]},
        "modules": [dataclasses.asdict(r) for r in result.modules],
        "memory": {**dataclasses.asdict(m), "estimate": m.estimate, "peak_over_estimate": m.peak_over_estimate},
    }


def render_inspect(result: InspectResult, console: Console, show_nodes: bool = False) -> None:
    console.print(
        f"[bold]torchsmith inspect[/] · {result.workload} · {result.device} · "
        f"{fmt_count(result.params)} parameters ({fmt_count(result.trainable_params)} trainable) · "
        f"FLOPs per step: forward {fmt_count(result.forward_flops)}, backward {fmt_count(result.backward_flops)}"
    )
    style = "dim" if result.graph.method == "fx" else "yellow"
    console.print(f"shapes: {result.graph.note}", style=style)
    if show_nodes and result.graph.nodes:
        nodes = Table(title="fx graph (ShapeProp)")
        for col in ("node", "op", "target", "shape", "dtype"):
            nodes.add_column(col)
        for n in result.graph.nodes:
            nodes.add_row(n.name, n.op, n.target, n.shape or "-", n.dtype or "-")
        console.print(nodes)

    table = Table(title="per module (each row includes its submodules; one batch)")
    table.add_column("module", no_wrap=True, min_width=12)
    table.add_column("type", overflow="ellipsis", no_wrap=True, max_width=14)
    for name in ("params", "output", "fwd FLOP", "bwd FLOP", "saved"):
        table.add_column(name, justify="left" if name == "output" else "right", no_wrap=True)
    for r in result.modules:
        table.add_row("  " * r.depth + (r.path.rsplit(".", 1)[-1] if r.path else "(model)"), r.type,
                      fmt_count(r.params), _shape(r.output_shape), fmt_count(r.forward_flops),
                      fmt_count(r.backward_flops), fmt_bytes(r.saved_bytes))
    console.print(table)
    console.print(
        "FLOPs count matmuls, convolutions and attention (FlopCounterMode); pointwise ops count zero. "
        "A saved tensor is attributed to the innermost module that saved it first"
        + (f"; {fmt_bytes(result.saved_outside_modules)} were saved outside any module (the loss)."
           if result.saved_outside_modules else "."), style="dim")

    m = result.memory
    mem = Table(title="training memory: estimate vs measured peak")
    mem.add_column("part")
    mem.add_column("bytes", justify="right")
    mem.add_column("share", justify="right")
    parts = [("parameters + buffers", m.parameters), ("gradients", m.gradients),
             ("optimizer state", m.optimizer_state), ("activations (saved for backward)", m.activations)]
    for name, value in parts:
        mem.add_row(name, fmt_bytes(value), f"{value / m.estimate:.0%}" if m.estimate else "-")
    mem.add_row("[bold]estimate (sum)", f"[bold]{fmt_bytes(m.estimate)}", "")
    mem.add_row("[bold]measured peak (one step)", f"[bold]{fmt_bytes(m.measured_peak)}",
                f"{m.peak_over_estimate:.2f}x")
    console.print(mem)
    console.print(
        f"Peak measured over a steady-state step ({m.method}). The sum is an upper bound of the "
        "persistent parts (gradients grow while activations are freed in backward) and misses "
        "transients such as the logits and their gradient.", style="dim")


def _shape(shape: str | None) -> str:
    """'(16, 128, 256)' -> '16x128x256': narrow enough for an 80-column terminal."""
    return shape.strip("()").replace(", ", "x").rstrip(",") if shape else "-"
