"""``torchsmith inspect``: what a model costs, per module, measured on one batch.

Modules:
    analyse       inspect_workload: parameters, FLOPs, saved bytes per module, a memory estimate
    graph         trace_shapes: output shapes per module (torch.fx with ShapeProp, or forward hooks)
"""

from torchsmith.inspect.analyse import InspectResult, MemoryEstimate, ModuleRow, inspect_workload
from torchsmith.inspect.graph import GraphInfo, NodeInfo, capture_inputs, trace_shapes

__all__ = ["InspectResult", "MemoryEstimate", "ModuleRow", "inspect_workload", "GraphInfo", "NodeInfo",
           "capture_inputs", "trace_shapes"]
