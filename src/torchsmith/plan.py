"""The Plan: every knob torchsmith can turn, as frozen typed configs.

``Plan()`` is the workload as written: eager fp32, PyTorch's default threads, no
transform. Each knob family is one frozen, keyword-only dataclass; variants are
types (``FP32() | Autocast(dtype=...)``), not mode strings. A plan round-trips
through JSON with a schema version, and loading is strict: an unknown key, a
wrong type or an out-of-range value raises :class:`PlanError` naming the key and
what is allowed.

Example::

    from torchsmith import Plan
    from torchsmith.plan import Autocast, Threads

    plan = Plan(threads=Threads(intra_op=2), precision=Autocast(dtype="bfloat16"))
    plan.save("plan.json")
    assert Plan.load("plan.json") == plan
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

SCHEMA_VERSION = 1


class PlanError(ValueError):
    """A plan file or value that does not validate."""


def _range(lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
    return {"min": lo, "max": hi}


class _Config:
    """Validates field types, Literal choices and numeric ranges on construction."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # a mixin: its subclasses are dataclasses
            _check(getattr(self, f.name), hints[f.name], f"{type(self).__name__}.{f.name}", f.metadata)


# --- strict JSON (de)serialisation --------------------------------------------------


def _to_json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        out = {"kind": obj.kind} if hasattr(type(obj), "kind") else {}  # type: ignore[union-attr]  # is_dataclass narrows Any; hasattr guards
        out.update({f.name: _to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
        return out
    return obj


def _variants(tp: Any) -> list[Any]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return list(typing.get_args(tp))
    return [tp]


def _from_json(tp: Any, value: Any, path: str) -> Any:
    options = _variants(tp)
    if value is None and type(None) in options:
        return None
    options = [o for o in options if o is not type(None)]
    classes: list[Any] = [o for o in options if dataclasses.is_dataclass(o)]
    if classes:
        if not isinstance(value, dict):
            raise PlanError(f"{path}: expected an object, found {value!r}")
        cls = classes[0]
        if len(classes) > 1 or hasattr(classes[0], "kind"):
            kinds = {c.kind: c for c in classes}
            kind = value.get("kind")
            if not isinstance(kind, str) or kind not in kinds:
                raise PlanError(f"{path}.kind: {kind!r} is not one of {sorted(kinds)}")
            cls = kinds[kind]
            value = {k: v for k, v in value.items() if k != "kind"}
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise PlanError(f"{path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(names) or 'none'}")
        kwargs = {n: _from_json(hints[n], value[n], f"{path}.{n}") for n in names if n in value}
        try:
            return cls(**kwargs)
        except PlanError as err:
            # __post_init__ names the field as `Class.field`; re-anchor it at its place in the file.
            raise PlanError(str(err).replace(f"{cls.__name__}.", f"{path}.", 1)) from None
    return value  # scalars are checked by the dataclass's __post_init__


def _check(value: Any, tp: Any, path: str, meta: Any = None) -> None:
    options = _variants(tp)
    if value is None:
        if type(None) in options:
            return
        raise PlanError(f"{path}: must not be null")
    errors = []
    for option in options:
        if option is type(None):
            continue
        if typing.get_origin(option) is Literal:
            if value in typing.get_args(option) and type(value) is type(typing.get_args(option)[0]):
                return
            errors.append(f"one of {list(typing.get_args(option))}")
        elif option is bool:
            if isinstance(value, bool):
                return
            errors.append("true or false")
        elif option in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float) if option is float else int):
                errors.append("an integer" if option is int else "a number")
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise PlanError(f"{path}: {value} is not a finite number")
            lo, hi = (meta or {}).get("min"), (meta or {}).get("max")
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise PlanError(f"{path}: {value} is out of range; allowed: {lo} to {hi}")
            return
        elif isinstance(option, type) and isinstance(value, option):
            return
        else:
            errors.append(getattr(option, "__name__", str(option)))
    raise PlanError(f"{path}: {value!r} is not allowed; expected {' or '.join(errors)}")


# --- knob families ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Threads(_Config):
    """CPU thread pools (``torch.set_num_threads`` / ``set_num_interop_threads``)."""

    intra_op: int | None = field(default=None, metadata=_range(1, 1024))
    """Threads inside one op (matmul, conv). None keeps PyTorch's default (one per physical core).
    More than the physical cores usually oversubscribes and slows down."""
    inter_op: int | None = field(default=None, metadata=_range(1, 1024))
    """Threads running independent ops in parallel. Can only be set once per process, before any
    parallel work; None keeps the default."""


@dataclass(frozen=True, kw_only=True)
class FP32(_Config):
    """Full fp32: the numerics the workload was written for."""

    kind: ClassVar[str] = "fp32"


@dataclass(frozen=True, kw_only=True)
class Autocast(_Config):
    """``torch.autocast``: matmuls and convs in a 16-bit dtype, reductions kept in fp32.

    float16 needs CUDA and a GradScaler (its range underflows small gradients). bfloat16 needs
    native hardware support to be fast: on a CPU without AVX512-BF16/AMX it is emulated and
    much slower than fp32."""

    kind: ClassVar[str] = "autocast"
    dtype: Literal["bfloat16", "float16"] = "bfloat16"


@dataclass(frozen=True, kw_only=True)
class BF16Params(_Config):
    """bf16 weights in Linear and Conv layers, with an fp32 master copy the optimizer updates.

    Each Linear/Conv computes in bf16 from bf16 weights and returns fp32, so norms, embeddings,
    residual sums and the loss stay fp32 (the numerically sensitive parts). The optimizer steps
    the fp32 master, so updates smaller than bf16's resolution (~0.4% of a weight) are not lost;
    the bf16 copy is refreshed after each step. Parameter memory is 1.5x fp32's; the gain is no
    per-forward weight cast and half the weight bytes read by each matmul. Needs native bf16
    hardware to be fast, like autocast."""

    kind: ClassVar[str] = "bf16_params"


Precision = Union[FP32, Autocast, BF16Params]


@dataclass(frozen=True, kw_only=True)
class Compile(_Config):
    """``torch.compile``. Compile time is paid once and reported apart from step time."""

    enabled: bool = False
    mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    """max-autotune benchmarks kernels at compile time: slower to compile, sometimes faster to run."""
    regional: bool = False
    """Compile each repeated block once (``model.blocks``) instead of the whole model: the same
    code is reused across blocks, so compile time falls roughly by the number of blocks."""


@dataclass(frozen=True, kw_only=True)
class MicroBatching(_Config):
    """Split each batch into micro-batches and accumulate gradients before one optimizer step."""

    count: int = field(default=1, metadata=_range(1, 4096))
    """Micro-batches per batch. Activation memory falls roughly by this factor; small
    micro-batches use the cores less well, so step time usually rises."""


@dataclass(frozen=True, kw_only=True)
class OptimizerImpl(_Config):
    """How the optimizer's update and gradient reset are executed (same maths)."""

    impl: Literal["as_written", "for_loop", "foreach", "fused"] = "as_written"
    """for_loop: one kernel per parameter per op; foreach: multi-tensor kernels over all
    parameters; fused: one kernel for the whole update (where the optimizer and device support it)."""
    set_to_none: bool = True
    """``zero_grad(set_to_none=True)`` frees gradients instead of writing zeros into them."""


@dataclass(frozen=True, kw_only=True)
class LossImpl(_Config):
    """How a language model's final Linear + cross-entropy is computed (same maths)."""

    impl: Literal["standard", "chunked"] = "standard"
    """standard: the workload's loss as written, with the full (tokens, vocab) logits. chunked:
    ``ops.linear_cross_entropy`` over row chunks, never holding the logits: much less memory when
    vocab >> model width (``benchmarks/linear_cross_entropy.py`` measures it at vocab 32k), more
    when vocab < width.
    Needs ``model.lm_head`` (nn.Linear) applied last and (inputs, targets) batches."""
    chunk_size: int | None = field(default=None, metadata=_range(1, 1 << 24))
    """Tokens per chunk. None: chunks of logits about max(tokens x width, 16Mi) elements. Smaller
    saves memory, but each chunk's matmul runs less efficiently."""


@dataclass(frozen=True, kw_only=True)
class NoCheckpointing(_Config):
    """Keep every activation for backward, as written."""

    kind: ClassVar[str] = "none"


@dataclass(frozen=True, kw_only=True)
class CheckpointBlocks(_Config):
    """Activation checkpointing of ``model.blocks``: a checkpointed block keeps only its input and
    recomputes its forward during backward. Saves ~all of the block's activations for ~one extra
    forward of it (``benchmarks/activation_memory.py`` measures both when every block is checkpointed)."""

    kind: ClassVar[str] = "blocks"
    every: int = field(default=1, metadata=_range(1, 1024))
    """Checkpoint blocks 0, k, 2k, ...; 1 = every block (most memory saved, most recompute)."""


@dataclass(frozen=True, kw_only=True)
class SelectiveCheckpoint(_Config):
    """Selective activation checkpointing of ``model.blocks``: keep matmul/attention/conv outputs
    (expensive to recompute), recompute pointwise ops (cheap: GELU, adds, norms). Less memory saved
    than full checkpointing, much less recompute."""

    kind: ClassVar[str] = "selective"
    every: int = field(default=1, metadata=_range(1, 1024))
    """Apply to blocks 0, k, 2k, ...; 1 = every block."""


Checkpointing = Union[NoCheckpointing, CheckpointBlocks, SelectiveCheckpoint]


@dataclass(frozen=True, kw_only=True)
class KeepSaved(_Config):
    """Saved activations stay where and how autograd put them, as written."""

    kind: ClassVar[str] = "keep"


@dataclass(frozen=True, kw_only=True)
class OffloadSaved(_Config):
    """``torch.autograd.graph.save_on_cpu``: saved activations move to host memory in forward and
    back to the GPU in backward. Frees GPU memory for PCIe traffic (CUDA only)."""

    kind: ClassVar[str] = "offload"
    pin_memory: bool = True
    """Pinned host buffers make the copies asynchronous (faster) but pin host RAM."""


@dataclass(frozen=True, kw_only=True)
class CompressSaved(_Config):
    """Store floating saved activations in a 16-bit dtype and cast back in backward: half the saved
    bytes, gradients perturbed by the 16-bit rounding (~0.4% relative per element for bf16)."""

    kind: ClassVar[str] = "compress"
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    """bfloat16 keeps fp32's range (no overflow); float16 has 3 more mantissa bits but overflows
    above 65504."""


SavedTensors = Union[KeepSaved, OffloadSaved, CompressSaved]


@dataclass(frozen=True, kw_only=True)
class MemoryFormat(_Config):
    """Memory layout of 4-D conv weights and inputs."""

    channels_last: bool = False
    """NHWC layout: conv kernels (oneDNN, cuDNN with tensor cores) often run faster and skip layout
    conversions. Only for models with 2-D convolutions."""


@dataclass(frozen=True, kw_only=True)
class InPlace(_Config):
    """In-place activation modules (``nn.ReLU(inplace=True)`` and kin)."""

    activations: bool = False
    """Overwrite the activation's input instead of allocating its output: one activation-sized
    buffer less at the forward peak. Autograd's version counter raises at backward if an op needed
    the overwritten input, so it is never silently wrong."""


@dataclass(frozen=True, kw_only=True)
class Single(_Config):
    """One process: no distributed wrap (also what a torchrun worker does with world size 1)."""

    kind: ClassVar[str] = "single"


@dataclass(frozen=True, kw_only=True)
class DDP(_Config):
    """``DistributedDataParallel``: full replica per rank, gradients all-reduced in buckets during backward."""

    kind: ClassVar[str] = "ddp"
    comm_hook: Literal["bf16", "fp16", "powersgd"] | None = None
    """Compress gradients for the all-reduce. ``"fp16"``/``"bf16"``: to 16 bits, half the bytes on
    the wire; bf16 keeps fp32's range with ~3 significant digits (NCCL only), fp16 keeps ~3.3 digits
    but can overflow above 65504 (works on gloo too). ``"powersgd"``: each gradient matrix sent as a
    rank-``powersgd_rank`` factorisation (Vogels et al., 2019), with error feedback; lossy, far fewer
    bytes for large layers. None all-reduces in the parameters' dtype."""
    powersgd_rank: int = field(default=1, metadata=_range(1, 64))
    """PowerSGD's matrix approximation rank: higher is closer to the exact gradient and sends more."""
    powersgd_start_iter: int = field(default=2, metadata=_range(2, 10**9))
    """PowerSGD's warm-up: plain all-reduce for this many steps first (PyTorch's own default is 1000;
    the tuner measures 2, what it can see within its steps; a longer warm-up is safer for convergence)."""
    bucket_cap_mb: int = field(default=25, metadata=_range(1, 1024))
    """MiB of gradients per all-reduce bucket. Larger buckets: fewer, bigger collectives (less
    latency per byte) but later overlap with backward."""
    gradient_as_bucket_view: bool = False
    """Make each ``.grad`` a view into its all-reduce bucket instead of a separate tensor: saves one
    copy of the gradients (memory and a copy per step). Code that replaces ``.grad`` outright breaks it."""
    static_graph: bool = False
    """Promise DDP that the set of parameters used, and the graph, are the same every step: it can
    then skip the per-step search for unused parameters and reorder buckets after the first step."""


@dataclass(frozen=True, kw_only=True)
class Zero1(_Config):
    """ZeRO stage 1 (``ZeroRedundancyOptimizer``) over DDP: each rank keeps the optimizer state of
    ~1/world of the parameters and broadcasts its updated shard after the step."""

    kind: ClassVar[str] = "zero1"


@dataclass(frozen=True, kw_only=True)
class FSDP2(_Config):
    """``fully_shard`` per block, then the root: parameters, gradients and optimizer state sharded."""

    kind: ClassVar[str] = "fsdp2"
    reshard_after_forward: bool = True
    """Free each block's gathered parameters after its forward and all-gather again in backward:
    less memory, one more all-gather per block per step."""
    mixed_precision: Literal["bf16"] | None = None
    """``MixedPrecisionPolicy``: ``"bf16"`` gathers the parameters and runs forward and backward in
    bfloat16 (half the all-gather bytes and bf16 matmuls), reducing gradients in fp32; the sharded
    master parameters and the optimizer stay fp32. None: everything in the parameters' dtype."""


Parallel = Union[Single, DDP, Zero1, FSDP2]


@dataclass(frozen=True, kw_only=True)
class LoaderConfig(_Config):
    """DataLoader arguments for a workload whose batches come from a loader factory
    (``Workload.loader``). Every field None keeps the workload's value as written."""

    num_workers: int | None = field(default=None, metadata=_range(0, 256))
    """Worker processes decoding batches in parallel with the step. 0 loads in the training
    process, in series with the step. Each worker costs a process, a copy of the dataset object
    (not of an mmapped store's data) and a core that the trainer's threads then share."""
    prefetch_factor: int | None = field(default=None, metadata=_range(1, 64))
    """Batches each worker loads ahead (PyTorch's default: 2). More hides uneven decode times at
    the cost of host memory. Ignored with 0 workers."""
    pin_memory: bool | None = None
    """Copy batches into page-locked memory so host-to-GPU copies can be asynchronous (CUDA
    only; ignored on a CPU). Pins host RAM and adds a copy on the host."""
    persistent_workers: bool | None = None
    """Keep workers alive across epochs: saves the worker start-up (process start, dataset
    unpickling) at each epoch, keeps their memory. Ignored with 0 workers."""
    batch_fetch: bool | None = None
    """Fetch a whole batch with one ``dataset[list_of_indices]`` (a batch sampler) instead of one
    ``dataset[i]`` per sample then collate. Faster for stores with a vectorised gather
    (``MmapDataset``); the same for per-sample decoding."""


@dataclass(frozen=True, kw_only=True)
class Backend(_Config):
    """Process-wide backend switches. Applied by the script injection (``torchsmith tune --
    python train.py``); a workload sets them in its own code. None keeps the script's value."""

    matmul_precision: Literal["highest", "high", "medium"] | None = None
    """``torch.set_float32_matmul_precision``: "high" lets fp32 matmuls use TF32 on Ampere+ GPUs
    (10-bit mantissa inputs, fp32 accumulation); "medium" also allows bf16 inputs. Faster matmuls,
    ~1e-3 relative error per product."""
    cudnn_benchmark: bool | None = None
    """``torch.backends.cudnn.benchmark``: time the cuDNN conv algorithms on each new input shape and
    keep the fastest (CUDA only). Costs a few slow first steps; with changing shapes it re-times often."""


# --- the plan -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Plan(_Config):
    """Everything torchsmith applies to a training step. ``Plan()`` is the as-written baseline."""

    threads: Threads = Threads()
    precision: Precision = FP32()
    compile: Compile = Compile()
    microbatching: MicroBatching = MicroBatching()
    optimizer: OptimizerImpl = OptimizerImpl()
    parallel: Parallel = Single()
    nonfinite: Literal["raise", "skip_step", "warn"] | None = None
    """What a step with a non-finite loss or gradient norm does. None: nothing is checked (as
    written). raise: stop with the first module and op that produced it; skip_step: leave the
    parameters and optimizer state untouched and go on; warn: report it and step anyway. Costs
    one isfinite check and one host-device sync per step."""
    auto_microbatch: bool = False
    """On out-of-memory in forward/backward, double the micro-batch count (halve each micro-batch),
    clear the gradients and retry the same batch. Same gradients, more passes; errors at 1 sample."""
    checkpointing: Checkpointing = NoCheckpointing()
    saved_tensors: SavedTensors = KeepSaved()
    memory_format: MemoryFormat = MemoryFormat()
    inplace: InPlace = InPlace()
    loader: LoaderConfig = LoaderConfig()
    loss_impl: LossImpl = LossImpl()
    backend: Backend = Backend()

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **_to_json(self)}

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        if not isinstance(data, dict):
            raise PlanError(f"a plan is a JSON object, found {type(data).__name__}")
        data = dict(data)
        version = data.pop("schema_version", None)
        if version != SCHEMA_VERSION:
            raise PlanError(
                f"plan schema_version is {version!r}, this torchsmith reads version {SCHEMA_VERSION}.\n"
                "Tip: re-run `torchsmith tune` to write a plan for this version."
            )
        return _from_json(cls, data, "plan")

    def save(self, path: str | os.PathLike) -> Path:
        """Write the plan as JSON, atomically (temp file, fsync, rename)."""
        from torchsmith.atomic import atomic_write_text

        return atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        path = Path(path)
        if path.is_dir():
            raise PlanError(
                f"plan file {str(path)!r} is a directory.\nTip: pass the plan.json inside it, "
                f"e.g. --plan {path / 'plan.json'}"
            )
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise PlanError(
                f"plan file {str(path)!r} does not exist.\nTip: write one with `torchsmith tune --out {path}`"
            ) from None
        except json.JSONDecodeError as err:
            raise PlanError(f"plan file {str(path)!r} is not valid JSON: {err}") from None
        except UnicodeDecodeError as err:
            raise PlanError(f"plan file {str(path)!r} is not UTF-8 text (byte {err.start}).") from None
        except RecursionError:
            raise PlanError(f"plan file {str(path)!r} nests too deeply to be a plan.") from None
        except OSError as err:
            raise PlanError(f"plan file {str(path)!r} cannot be read: {err.strerror or err}.") from None
        try:
            return cls.from_dict(data)
        except PlanError as err:
            raise PlanError(f"{path}: {err}") from None

    def replace(self, **changes: Any) -> Plan:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """A short human label of what differs from the baseline, e.g. ``threads=1 + compile``."""
        parts = []
        for name, value, _default in _differences(self, Plan()):
            parts.append(f"{name}={value}")
        return " + ".join(parts) or "as written"


def _differences(plan: Any, base: Any, prefix: str = ""):
    for f in dataclasses.fields(plan):
        a, b = getattr(plan, f.name), getattr(base, f.name)
        if a == b:
            continue
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            yield from _differences(a, b, name + ".")
        elif dataclasses.is_dataclass(a):
            # Only what differs from the variant's own defaults: ``ddp(bucket_cap_mb=100)``, not every field.
            defaults = _to_json(type(a)())  # type: ignore[misc]  # is_dataclass(a) narrows to the instance
            args = ",".join(f"{k}={v}" for k, v in _to_json(a).items() if k != "kind" and v != defaults.get(k))
            yield name, f"{a.kind}({args})" if args else a.kind, b  # type: ignore[union-attr]  # is_dataclass narrows Any; variants have .kind
        else:
            yield name, a, b
