"""Debugging numerics and graphs: gradient norms, NaN/Inf culprits, gradchecks, fx graphs, OOMs.

Modules:
    grad_monitor  GradMonitor: per-layer gradient norms over steps, vanishing and exploding flags
    gradcheck     check_gradients: gradcheck / gradgradcheck / opcheck of a custom Function or op, per input
    graph         inspect_graph: the traced graph with shapes and FLOPs per node, torch.compile's graph breaks
    nan_sentinel  NaNSentinel: the first module and op that produced a non-finite value
    oom           explain_oom: the out-of-memory explainer around any code

Example::

    from torchsmith.debug import GradMonitor, NaNSentinel
    with NaNSentinel(model) as sentinel:
        finding = sentinel.watch(lambda: loss_fn(model, batch).backward())
"""

from torchsmith.debug.grad_monitor import GradFlag, GradMonitor, GradReport
from torchsmith.debug.gradcheck import GradcheckReport, InputCheck, check_gradients, make_inputs
from torchsmith.debug.graph import GraphBreak, GraphReport, capture_inputs, inspect_graph
from torchsmith.debug.nan_sentinel import NaNSentinel
from torchsmith.debug.oom import OOMReport, explain_oom

__all__ = [
    "GradFlag", "GradMonitor", "GradReport", "GradcheckReport", "GraphBreak", "GraphReport", "InputCheck",
    "NaNSentinel", "OOMReport", "capture_inputs", "check_gradients", "explain_oom", "inspect_graph", "make_inputs",
]
