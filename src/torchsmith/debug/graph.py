"""Graph inspection: the traced graph with shapes and FLOPs per node, and torch.compile's graph breaks.

Tracing tries ``torch.fx.symbolic_trace`` first (it keeps module-level calls readable) and
falls back to ``torch.export`` where fx fails (data-dependent Python control flow, e.g. a
``if T > block_size`` check on an input's shape), and says which one worked and why fx
failed. Shapes come from ``ShapeProp`` run on example inputs; FLOPs per node from
``FlopCounterMode`` around each node's execution. Graph breaks come from
``torch._dynamo.explain``: how many graphs ``torch.compile`` would make, and why it broke.

Example::

    report = inspect_graph(model, (x,))
    report.tracer, report.total_flops, report.graph_breaks
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils.flop_counter import FlopCounterMode

from torchsmith.inspect.graph import NodeInfo, capture_inputs  # noqa: F401  (capture_inputs: part of debug's API)
from torchsmith.text import first_line
from torchsmith.torch_compat import tree_leaves


@dataclass(frozen=True)
class GraphBreak:
    reason: str
    where: str
    """file:line of the user code that broke the graph, when known."""


@dataclass(frozen=True, kw_only=True)
class GraphReport:
    tracer: str | None
    """"torch.fx.symbolic_trace" or "torch.export"; None when both failed (see the errors)."""
    fx_error: str | None
    """Why fx failed, when torch.export was tried."""
    export_error: str | None = None
    """Why torch.export failed too (then ``nodes`` is empty, graph breaks are still reported)."""
    nodes: list[NodeInfo] = field(default_factory=list)
    total_flops: int = 0
    graph_count: int | None = None
    """Graphs torch.compile would make (1 = no break); None if explain failed."""
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    explain_error: str | None = None


class _ShapeFlopProp(ShapeProp):
    """ShapeProp that also counts each node's FLOPs."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.flops: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        with FlopCounterMode(display=False) as counter:
            out = super().run_node(n)
        self.flops[n.name] = counter.get_total_flops()
        return out


@contextlib.contextmanager
def _quiet():
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch.export", "torch._export", "torch.fx")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {first_line(err)[:300]}"


def trace(model: nn.Module, args: tuple, kwargs: dict | None = None
          ) -> tuple[fx.GraphModule | None, str | None, str | None, str | None]:
    """(graph module, tracer name, fx failure, export failure): fx first, torch.export where fx fails."""
    try:
        return fx.symbolic_trace(model), "torch.fx.symbolic_trace", None, None
    except Exception as err:  # fx cannot follow Python control flow on traced values
        fx_error = _why(err)
    try:
        with _quiet():  # a failed export prints the partial graph; the reason is kept below
            return torch.export.export(model, args, kwargs or {}).module(), "torch.export", fx_error, None
    except Exception as err:  # e.g. a branch on a tensor's value
        return None, None, fx_error, _why(err)


def _shapes(value: Any) -> tuple[list[list[int]], str | None]:
    tensors = [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
    return [list(t.shape) for t in tensors], (str(tensors[0].dtype).removeprefix("torch.") if tensors else None)


def graph_breaks(model: nn.Module, args: tuple,
                 kwargs: dict | None = None) -> tuple[int | None, list[GraphBreak], str | None]:
    """(graph count, breaks, error) from ``torch._dynamo.explain``; compiles nothing for real."""
    import torch._dynamo

    try:
        with _quiet():  # dynamo logs each break as a warning; they are returned as data instead
            out = torch._dynamo.explain(model)(*args, **(kwargs or {}))
    except Exception as err:
        return None, [], _why(err)
    finally:
        torch._dynamo.reset()
    breaks = []
    for b in out.break_reasons:
        frame = b.user_stack[-1] if b.user_stack else None
        where = f"{frame.filename}:{frame.lineno}" if frame is not None else ""
        breaks.append(GraphBreak(first_line(str(b.reason))[:300], where))
    return out.graph_count, breaks, None


def _module_of(n: fx.Node) -> str:
    if n.op in ("call_module", "get_attr"):
        return str(n.target).rpartition(".")[0] if n.op == "get_attr" else str(n.target)
    stack = n.meta.get("nn_module_stack")  # torch.export: {key: (qualified name, class)}, outermost first
    return list(stack.values())[-1][0] if stack else ""


def inspect_graph(model: nn.Module, args: tuple, kwargs: dict | None = None, *, explain: bool = True) -> GraphReport:
    """Trace ``model`` on example inputs: nodes with shapes and FLOPs, and graph breaks.

    Example::

        report = inspect_graph(model, (torch.randn(2, 16),))
        for node in report.nodes:
            node.name, node.shapes, node.flops
    """
    was_training = model.training
    gm, tracer, fx_error, export_error = trace(model, args, kwargs)
    prop = _ShapeFlopProp(gm) if gm is not None else None
    if prop is not None:
        with torch.no_grad():
            prop.propagate(*tree_leaves((args, kwargs or {})) if tracer == "torch.export" else args)
    nodes = []
    for n in gm.graph.nodes if gm is not None else []:
        assert prop is not None  # set whenever gm is
        meta = n.meta.get("tensor_meta")
        shapes = ([list(m.shape) for m in tree_leaves(meta, is_leaf=lambda x: hasattr(x, "shape"))
                   if hasattr(m, "shape")]
                  if meta is not None else [])
        dtype = next((str(m.dtype).removeprefix("torch.")
                      for m in tree_leaves(meta, is_leaf=lambda x: hasattr(x, "dtype"))
                      if hasattr(m, "dtype")), None) if meta is not None else None
        if n.op == "call_module" and n.target == "_guards_fn":  # export's input guard, not the model's
            continue
        target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        nodes.append(NodeInfo(n.name, n.op, str(target), shapes, dtype, module=_module_of(n),
                              flops=prop.flops.get(n.name, 0)))
    count, breaks, explain_error = graph_breaks(model, args, kwargs) if explain else (None, [], None)
    model.train(was_training)
    return GraphReport(tracer=tracer, fx_error=fx_error, export_error=export_error, nodes=nodes,
                       total_flops=sum(n.flops for n in nodes),
                       graph_count=count, graph_breaks=breaks, explain_error=explain_error)
