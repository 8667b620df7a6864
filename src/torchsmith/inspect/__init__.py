"""``torchsmith inspect``: what a model costs, per module, measured on one batch."""

from torchsmith.inspect.analyse import InspectResult, MemoryEstimate, ModuleRow, inspect_workload
from torchsmith.inspect.graph import GraphInfo, NodeInfo, capture_inputs, trace_shapes

__all__ = ["InspectResult", "MemoryEstimate", "ModuleRow", "inspect_workload", "GraphInfo", "NodeInfo",
           "capture_inputs", "trace_shapes"]
