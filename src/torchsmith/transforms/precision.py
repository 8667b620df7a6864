"""Mixed precision: autocast to bf16/fp16 around forward and loss, GradScaler for fp16."""

from __future__ import annotations

import functools

import torch

from torchsmith.plan import FP32, Autocast, BF16Params, Precision
from torchsmith.transforms.base import Change, DeviceInfo, TransformError, TransformInfo
from torchsmith.transforms.parts import StepParts


def apply_precision(parts: StepParts, cfg: Precision) -> Change:
    """Run forward and loss under ``torch.autocast``; the backward follows the forward's dtypes.

    >>> change = apply_precision(parts, Autocast(dtype="bfloat16"))  # doctest: +SKIP
    """
    change = Change("precision", "fp32, as written")
    if isinstance(cfg, FP32):
        return change
    if isinstance(cfg, BF16Params):
        from torchsmith.transforms.bf16_params import apply_bf16_params

        return apply_bf16_params(parts)
    device_type = parts.device.type
    if cfg.dtype == "float16" and device_type != "cuda":
        raise TransformError(
            f"fp16 autocast needs CUDA, and this step runs on {device_type}: fp16 on CPU has no fast kernels and "
            "its narrow range needs a GradScaler, which PyTorch provides for CUDA.\n"
            "Tip: use Autocast(dtype='bfloat16') on CPU, and only if torchsmith measures it faster."
        )
    dtype = getattr(torch, cfg.dtype)
    before = parts.autocast, parts.scaler
    parts.autocast = functools.partial(torch.autocast, device_type=device_type, dtype=dtype)
    if cfg.dtype == "float16":
        # fp16's 5-bit exponent underflows small gradients; the scaler multiplies the loss up
        # before backward and skips steps whose gradients overflowed.
        parts.scaler = torch.amp.GradScaler(device_type)
    change.summary = f"autocast({cfg.dtype}) around forward and loss" + (" with GradScaler" if parts.scaler else "")
    change.targets.append("forward")

    def undo() -> None:
        parts.autocast, parts.scaler = before

    change.on_revert(undo)
    return change


def _candidates(device: DeviceInfo) -> list[Precision]:
    # bf16 is tried even on CPUs without native bf16: tune decides by measurement, not by rule.
    out: list[Precision] = [Autocast(dtype="bfloat16"), BF16Params()]
    if device.type == "cuda":
        out.append(Autocast(dtype="float16"))
    return out


INFO = TransformInfo(
    name="precision",
    plan_field="precision",
    summary="Autocast to bf16/fp16 (GradScaler for fp16), or bf16 Linear/Conv weights with fp32 masters.",
    devices=frozenset({"cpu", "cuda"}),
    candidates=_candidates,
    trade="speed",
    rank=lambda device: 0 if device.native_bf16 or device.type == "cuda" else 5,
)
