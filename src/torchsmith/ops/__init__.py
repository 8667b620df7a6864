"""Custom operators whose hand-written backward saves real memory, each gradchecked.

- :func:`linear_cross_entropy`: LM head + cross-entropy in row chunks, never holding the
  ``(tokens, vocab)`` logits (a ``torch.library`` custom op; ``Plan.loss_impl='chunked'``);
- :func:`gelu`, :func:`silu` (:class:`LeanGELU`, :class:`LeanSiLU`): activations that save
  only their input;
- :func:`act_linear` (:class:`ActLinearMLP`): activation + Linear that saves only the
  pre-activation, not the activation's output.

Modules:
    act_linear            act_linear / ActLinearMLP: activation + Linear saving the pre-activation only
    activations           gelu / silu (LeanGELU, LeanSiLU): activations that save only their input
    linear_cross_entropy  linear_cross_entropy: the chunked LM-head loss, a torch.library custom op
"""

from torchsmith.ops.act_linear import ActLinearMLP, act_linear
from torchsmith.ops.activations import LeanGELU, LeanSiLU, gelu, silu
from torchsmith.ops.linear_cross_entropy import linear_cross_entropy

__all__ = ["linear_cross_entropy", "gelu", "silu", "LeanGELU", "LeanSiLU", "act_linear", "ActLinearMLP"]
