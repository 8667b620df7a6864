"""bf16 parameters for Linear and Conv layers, with fp32 master weights (``Precision = BF16Params()``).

Where it is safe, and why:

* only Linear/Conv weights and biases become bf16: matmuls and convs tolerate bf16 inputs with
  fp32 accumulation. Norms, embeddings and everything else keep fp32 parameters;
* each converted layer casts its floating inputs to bf16 and its output back to fp32, so the
  residual stream, norms, softmax and the loss are computed in fp32;
* the optimizer keeps stepping the original fp32 parameters (the masters): an AdamW update is
  often below bf16's resolution (8 mantissa bits, ~0.4% of the weight) and would be rounded
  away if applied to bf16 weights. Gradients flow into the masters as fp32 as soon as autograd
  has accumulated them into the bf16 copy; after each optimizer step the bf16 copy is refreshed;
* ``state_dict()`` reports the fp32 masters and ``load_state_dict`` fills them, so checkpoints
  stay exact and interchangeable with fp32 runs;
* a parameter shared by several modules (GPT-2's LM head and token embedding are one tensor)
  stays registered everywhere as itself, the one fp32 master: the tie survives. A Linear that
  uses it casts it to bf16 for the duration of its forward only (autograd brings the gradient
  back to the master in fp32), while the embedding keeps reading fp32;
* Hugging Face's ``Conv1D`` (GPT-2's attention and MLP projections: a Linear with a transposed
  weight) is converted like ``nn.Linear``.

Example::

    change = apply_bf16_params(parts)
    parts.model.blocks[0].mlp.c_fc.weight.dtype    # torch.bfloat16
    change.revert()                                 # the fp32 masters are back in the model
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from torchsmith.transforms.base import Change, TransformError, mark_applied
from torchsmith.transforms.parts import StepParts

LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def is_layer(module: nn.Module) -> bool:
    """A Linear/Conv layer, or Hugging Face's ``Conv1D`` (matched by name: transformers stays optional)."""
    return isinstance(module, LAYERS) or (type(module).__name__ == "Conv1D" and hasattr(module, "nf"))


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _inputs_to_bf16(module: nn.Module, args: tuple) -> tuple:
    return _cast(args, torch.bfloat16)


def _output_to_fp32(module: nn.Module, args: tuple, output: Any) -> Any:
    return _cast(output, torch.float32)


def apply_bf16_params(parts: StepParts) -> Change:
    """Swap Linear/Conv parameters for bf16 copies; the optimizer keeps the fp32 masters."""
    model, optimizer = parts.model, parts.optimizer
    change = Change("precision", "bf16 Linear/Conv parameters")
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    uses: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[id(p)] = uses.get(id(p), 0) + 1
    layers = [(n, m) for n, m in model.named_modules() if is_layer(m)]
    convertible = [(n, m) for n, m in layers
                   if all(p.dtype == torch.float32 and id(p) in in_optimizer for p in m.parameters(recurse=False))]
    if not convertible:
        raise TransformError(
            f"bf16 parameters apply to fp32 Linear/Conv layers whose parameters the optimizer owns; "
            f"{type(model).__name__} has {len(layers)} Linear/Conv layers and none qualifies.\n"
            "Tip: use Autocast(dtype='bfloat16') instead: it casts per op and needs no parameter swap."
        )
    mark_applied(model, "bf16_params", change)
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (fp32 master, bf16 working copy)
    shared_values = 0
    for name, module in convertible:
        masters = module.__dict__.setdefault("_torchsmith_masters", {})
        change.on_revert(functools.partial(module.__dict__.pop, "_torchsmith_masters", None))
        shared = [k for k, p in module._parameters.items() if p is not None and uses[id(p)] > 1]
        if shared:  # tied: keep the one master registered, cast it during this module's forward only
            for handle in (module.register_forward_pre_hook(_cast_shared(shared)),
                           module.register_forward_hook(_restore_shared(shared), always_call=True)):
                change.on_revert(handle.remove)
            shared_values += sum(module._parameters[k].numel() for k in shared)
        for pname, master in list(module._parameters.items()):
            if master is None or pname in shared:
                continue
            masters[pname] = master
            working = nn.Parameter(master.detach().to(torch.bfloat16), requires_grad=master.requires_grad)
            module._parameters[pname] = working
            change.on_revert(functools.partial(module._parameters.__setitem__, pname, master))
            pairs.append((master, working))
            if working.requires_grad:
                handle = working.register_post_accumulate_grad_hook(_grad_to_master(master))
                change.on_revert(handle.remove)
        for handle in (module.register_forward_pre_hook(_inputs_to_bf16),
                       module.register_forward_hook(_output_to_fp32),
                       module.register_state_dict_post_hook(_report_masters),
                       module.register_load_state_dict_pre_hook(_load_masters)):
            change.on_revert(handle.remove)
        change.targets.append(name)

    @torch.no_grad()
    def refresh(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for master, working in pairs:
            working.copy_(master)  # after each step: the bf16 copy follows the updated master

    handle = optimizer.register_step_post_hook(refresh)
    change.on_revert(handle.remove)
    n = sum(w.numel() for _, w in pairs)
    change.summary = f"bf16 parameters in {len(convertible)} Linear/Conv layers ({n:,} values), fp32 masters"
    if shared_values:
        change.summary += f"; {shared_values:,} shared (tied) values stay fp32, cast to bf16 in forward"
    return change


_SHARED = "_torchsmith_shared_masters"


def _cast_shared(names: list[str]):
    def pre(module: nn.Module, args: tuple) -> None:
        # For this forward only, the registered tensor is a bf16 cast of the shared master
        # (differentiable: its gradient reaches the master in fp32). The post-hook puts it back.
        kept = module.__dict__[_SHARED] = {k: module._parameters[k] for k in names}
        for k, master in kept.items():
            module._parameters[k] = master.to(torch.bfloat16)

    return pre


def _restore_shared(names: list[str]):
    def post(module: nn.Module, args: tuple, output: Any) -> None:
        # always_call: the tie is restored even when the forward raised.
        for k, master in module.__dict__.pop(_SHARED, {}).items():
            module._parameters[k] = master

    return post


def _grad_to_master(master: torch.Tensor):
    def hook(working: torch.Tensor) -> None:
        # Move the gradient to the master as fp32 right away: micro-batches accumulate in fp32,
        # and optimizer.zero_grad (which only sees the masters) clears everything.
        assert working.grad is not None  # a post-accumulate-grad hook: the gradient was just accumulated
        grad = working.grad.float()
        master.grad = grad if master.grad is None else master.grad.add_(grad)
        working.grad = None

    return hook


def _report_masters(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    for pname, _working in module._parameters.items():
        master = _master_of(module, pname)
        if master is not None and prefix + pname in state_dict:
            value = state_dict[prefix + pname]
            state_dict[prefix + pname] = master if isinstance(value, nn.Parameter) else master.detach()


def _load_masters(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    for pname in module._parameters:
        master = _master_of(module, pname)
        if master is not None and prefix + pname in state_dict:
            with torch.no_grad():
                master.copy_(state_dict[prefix + pname])


def _master_of(module: nn.Module, pname: str) -> torch.Tensor | None:
    return module.__dict__.get("_torchsmith_masters", {}).get(pname)
