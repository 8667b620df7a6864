"""Common training folklore, checked by measurement on this machine.

Each check is one function that measures and returns a :class:`FolkloreResult` saying
what was measured, with the figures. None of them asserts the folklore true or false
by decree: the verdict is written from the numbers.

Example::

    r = check_addmm(n=512)
    r.verdict, r.figures["addmm_out_of_place_peak_bytes"]
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchsmith.measure.memory import track_peak_memory
from torchsmith.measure.saved import count_saved_tensors
from torchsmith.text import first_line


@dataclass(frozen=True)
class FolkloreResult:
    name: str
    claim: str
    """The folklore as people state it."""
    verdict: str
    """One sentence written from the measurement."""
    details: list[str]
    """The measured facts behind the verdict, one per line."""
    figures: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Parts not measured here, with the reason (e.g. the CUDA half without CUDA)."""


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


# --- addmm_ -------------------------------------------------------------------------


def _extra_bytes(device: torch.device, fn: Callable[[], Any]) -> tuple[int, int, Any]:
    """(peak bytes above the start, bytes still held at the end, fn's result) for ``fn``."""
    with track_peak_memory(device) as mem:
        out = fn()
    return mem.result.peak_delta_bytes, mem.result.end_bytes - mem.result.start_bytes, out


def check_addmm(n: int = 1024, device: str | torch.device = "cpu") -> FolkloreResult:
    """``x.addmm_(y, x)`` vs ``z = x.mm(y) + x``: what each computes, whether it is right, what it allocates."""
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, n, generator=g).to(device)
    y = torch.randn(n, n, generator=g).to(device)
    matrix = n * n * x.element_size()
    yx_plus_x = torch.addmm(x, y, x)  # x + y @ x, out of place: what x.addmm_(y, x) is documented to compute
    a, b = x.clone(), x.clone()
    peak_plus, kept_plus, z = _extra_bytes(device, lambda: x.mm(y) + x)               # x @ y + x
    peak_fused, kept_fused, f = _extra_bytes(device, lambda: torch.addmm(x, x, y))    # x + x @ y, one output
    peak_yx, _, _ = _extra_bytes(device, lambda: a.addmm_(y, a))                      # a += y @ a, a aliased
    peak_xy, _, _ = _extra_bytes(device, lambda: b.addmm_(b, y))                      # b += b @ y, b aliased

    def rel(u: torch.Tensor, v: torch.Tensor) -> float:
        return (u - v).abs().max().item() / v.abs().max().item()

    maths = rel(yx_plus_x, z)  # x + y@x against x@y + x: different maths
    err_yx, err_xy, err_fused = rel(a, yx_plus_x), rel(b, z), rel(f, z)
    ok = lambda e: e < 1e-4  # noqa: E731 - float32 rounding over n-term dot products stays far below
    figures = {
        "n": n, "matrix_bytes": matrix, "rel_diff_x_plus_yx_vs_xy_plus_x": maths,
        "mm_plus_peak_bytes": peak_plus, "mm_plus_kept_bytes": kept_plus,
        "addmm_out_of_place_peak_bytes": peak_fused, "addmm_out_of_place_rel_err": err_fused,
        "addmm_inplace_yx_peak_bytes": peak_yx, "addmm_inplace_yx_rel_err": err_yx,
        "addmm_inplace_xy_peak_bytes": peak_xy, "addmm_inplace_xy_rel_err": err_xy,
    }
    unit = f"one {n}x{n} matrix ({_mib(matrix)})"
    details = [
        f"x.addmm_(y, x) is documented to compute x + y @ x, and z = x.mm(y) + x computes x @ y + x: on random "
        f"{n}x{n} matrices these differ by {maths:.0%} of max|z|. Different maths, not a rewrite.",
        f"Measured: x.addmm_(y, x) {'matched' if ok(err_yx) else 'did NOT match'} x + y @ x "
        f"(relative error {err_yx:.1e}); x.addmm_(x, y) {'matched' if ok(err_xy) else 'did NOT match'} x @ y + x "
        f"({err_xy:.1e}). The output aliases an operand, so the kernel overwrites x while still reading it.",
        f"Extra memory at peak, in units of {unit}: x.mm(y) + x {peak_plus / matrix:.2f} (a temporary for "
        f"x @ y, then z; keeps {kept_plus / matrix:.2f}); torch.addmm(x, x, y) {peak_fused / matrix:.2f} with the "
        f"same result (error {err_fused:.1e}); in-place addmm_ {peak_yx / matrix:.2f} and {peak_xy / matrix:.2f}.",
        "The saving that is real and safe is the fused out-of-place torch.addmm(x, x, y) (or out= into a "
        "buffer that aliases no operand); under autograd, in place on a tensor backward needs raises.",
    ]
    fused_saving = 1 - peak_fused / peak_plus if peak_plus else 0.0
    verdict = ("addmm_(y, x) means x + y@x, not x@y + x"
               + ("" if ok(err_yx) else ", and with x aliased as an operand it returned a wrong result here")
               + f". torch.addmm(x, x, y) gives z with {fused_saving:.0%} less peak extra memory.")
    return FolkloreResult("addmm_", "x.addmm_(y, x) saves 50% memory over z = x.mm(y) + x", verdict, details, figures)


# --- empty_cache vs a retained graph --------------------------------------------------


def _retaining_loop(model: nn.Module, x: torch.Tensor, iters: int, keep_graph: bool, empty_cache: bool) -> Any:
    total: Any = 0.0
    for _ in range(iters):
        loss = model(x).pow(2).mean()
        # The classic leak: `total += loss` keeps every iteration's graph (and the
        # activations it saved) alive through `total`; `.item()` keeps only a float.
        total = total + loss if keep_graph else total + loss.item()
    if empty_cache:
        torch.cuda.empty_cache()
    return total


def check_empty_cache(device: str | torch.device = "cpu", iters: int = 4) -> FolkloreResult:
    """Memory held by a retained autograd graph, before and after ``torch.cuda.empty_cache()``."""
    device = torch.device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(device)
    x = torch.randn(256, 512, device=device)
    with count_saved_tensors(model) as saved:
        model(x).pow(2).mean()
    per_iter = saved.result.bytes
    keep: dict[str, Any] = {}

    def held(keep_graph: bool, empty: bool) -> int:
        with track_peak_memory(device, live=(model,)) as mem:
            keep["total"] = _retaining_loop(model, x, iters, keep_graph, empty)
        return mem.result.end_bytes - mem.result.start_bytes

    leak = held(True, False)
    leak_after_empty = held(True, True)
    with track_peak_memory(device, live=(model,)) as mem:
        keep.pop("total")  # drop the last reference to the retained graphs
    freed_by_del = mem.result.start_bytes - mem.result.end_bytes if device.type == "cuda" else None
    fixed = held(False, True)
    keep.clear()
    figures: dict[str, Any] = {"iters": iters, "saved_bytes_per_iter": per_iter, "held_bytes": leak,
                               "held_bytes_after_empty_cache": leak_after_empty, "held_bytes_with_item": fixed}
    details = [
        f"{iters} iterations of `total = total + loss` keep {_mib(leak)} alive at the end "
        f"({leak / max(per_iter, 1):.1f}x the {_mib(per_iter)} one forward saves for backward): "
        "each iteration's graph is retained through `total`.",
        f"The same loop followed by torch.cuda.empty_cache() still holds {_mib(leak_after_empty)}: "
        "empty_cache returns only *unused* cached blocks to the driver; it cannot free memory "
        "that live tensors (here, the retained graph's saved activations) still reference.",
        f"Accumulating `loss.item()` instead holds {_mib(fixed)}. The fix is dropping the reference "
        "(.item(), .detach(), or `del`), not emptying the cache.",
    ]
    skipped = []
    if device.type == "cuda":
        before = torch.cuda.memory_reserved(device)
        torch.cuda.empty_cache()
        figures.update(reserved_after_empty_cache=torch.cuda.memory_reserved(device), reserved_before=before,
                       freed_by_del=freed_by_del)
        details.append(f"On {device}: deleting the graph freed {_mib(freed_by_del or 0)} of allocated memory; "
                       f"empty_cache then shrank reserved memory from {_mib(before)} to "
                       f"{_mib(figures['reserved_after_empty_cache'])} (returned to the driver, not to tensors).")
    else:
        skipped.append("CUDA part (allocated vs reserved memory around empty_cache): no CUDA device here; "
                       "on CPU torch.cuda.empty_cache() does nothing at all.")
    verdict = (f"False: empty_cache left {_mib(leak_after_empty)} of {_mib(leak)} held by the retained graph; "
               "only dropping the reference (loss.item()) frees it." if leak_after_empty >= 0.9 * leak > 0 else
               f"Measured {_mib(leak)} held, {_mib(leak_after_empty)} after empty_cache.")
    return FolkloreResult("empty_cache", "torch.cuda.empty_cache() fixes an OOM caused by a retained graph",
                          verdict, details, figures, skipped)


# --- torch.jit.script vs eager vs torch.compile --------------------------------------


def tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    """A pointwise chain (GELU, tanh form): eager runs ~8 kernels, each a full pass over memory."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _interleaved(fns: dict[str, Callable[[], Any]], rounds: int, inner: int) -> dict[str, float]:
    """Median seconds per call of each function, timed in interleaved rounds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    sync = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else (lambda: None)
    for r in range(rounds):
        names = list(fns)
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
            sync()
            start = time.perf_counter()
            for _ in range(inner):
                fns[name]()
            sync()  # CPU-GPU sync point: time the kernels, not their launch
            times[name].append((time.perf_counter() - start) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def check_jit_script(device: str | torch.device = "cpu", numel: int = 1 << 20, rounds: int = 7,
                     inner: int = 10) -> FolkloreResult:
    """Time ``tanh_gelu`` eager, under ``torch.jit.script`` and under ``torch.compile``."""
    device = torch.device(device)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)
    ref = tanh_gelu(x)
    fns: dict[str, Callable[[], Any]] = {"eager": lambda: tanh_gelu(x)}
    figures: dict[str, Any] = {"numel": numel}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scripted = torch.jit.script(tanh_gelu)
    deprecation = next((str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)), None)
    for _ in range(3):  # the profiling executor specialises after a couple of calls
        scripted(x)
    fns["jit.script"] = lambda: scripted(x)
    errors = {}
    try:
        compiled = torch.compile(tanh_gelu)
        start = time.perf_counter()
        out = compiled(x)
        figures["compile_seconds"] = time.perf_counter() - start
        figures["compile_max_abs_diff"] = (out - ref).abs().max().item()
        fns["compile"] = lambda: compiled(x)
    except Exception as err:  # no C++ compiler, unsupported platform: reported, not fatal
        errors["compile"] = f"{type(err).__name__}: {first_line(str(err))}"
    figures["script_max_abs_diff"] = (scripted(x) - ref).abs().max().item()
    med = _interleaved(fns, rounds, inner)
    figures.update({f"{k}_seconds": v for k, v in med.items()})
    details = [f"{k}: {v * 1e3:.3f} ms per call ({med['eager'] / v:.2f}x eager)" for k, v in med.items()]
    details += [f"{k} failed: {v}" for k, v in errors.items()]
    if "compile_seconds" in figures:
        details.append(f"torch.compile's first call took {figures['compile_seconds']:.1f} s (compilation, or a hit in "
                       "Inductor's on-disk cache from an earlier run; paid once, not in the times above).")
    details.append("TorchScript is in maintenance mode: no new features, and torch "
                   f"{torch.__version__.split('+')[0]} warns on torch.jit.script: "
                   f"\"{deprecation or 'no deprecation warning was raised'}\". Use torch.compile or torch.export.")
    figures["script_deprecation_warning"] = deprecation
    s = med["eager"] / med["jit.script"]
    c = med["eager"] / med["compile"] if "compile" in med else None
    verdict = (f"jit.script ran at {s:.2f}x eager speed"
               + (f", torch.compile at {c:.2f}x" if c else "") + " on this pointwise chain; TorchScript is deprecated.")
    return FolkloreResult("jit.script", "torch.jit.script speeds up hot paths", verdict, details, figures)


CHECKS: dict[str, Callable[..., FolkloreResult]] = {
    "addmm_": check_addmm,
    "empty_cache": check_empty_cache,
    "jit.script": check_jit_script,
}


def run_folklore(device: str | torch.device = "cpu",
                 on_check: Callable[[str], None] | None = None) -> list[FolkloreResult]:
    """Every folklore check on ``device``, in order."""
    out = []
    for name, check in CHECKS.items():
        if on_check:
            on_check(name)
        out.append(check(device=device))
    return out
