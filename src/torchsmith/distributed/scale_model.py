"""Predict step time and per-rank peak memory of DDP, ZeRO-1 and FSDP2 at N ranks from 1-rank measurements.

Inputs, all measured without running N ranks:

- :class:`StepProfile`: one rank's forward, backward and optimizer seconds of a step on the
  per-rank micro-batch it would get at N ranks, and that step's peak memory. On a CPU host
  whose cores the ranks share, measure it with the host's other ranks' compute running
  beside it (copies of the same 1-rank step, no process group): a rank alone on the machine
  does not see the cores and memory bandwidth its neighbours take;
- :class:`ModelShape`: the bytes of each parameter tensor and of each repeated block
  (:func:`model_shape`), from which each strategy's collectives are derived;
- a :class:`~torchsmith.distributed.alpha_beta.Link` (assumed: ``parse_interconnect("100Gbps,5us")``),
  or one per collective fitted to collective microbenchmarks (``links_of(fit_links(samples))``).

Communication per step, derived from the shape (not counted on an N-rank run):

- DDP all-reduces the gradients in buckets of ``bucket_cap_bytes`` (filled in reverse
  parameter order, the order backward produces them). Each bucket's all-reduce can run
  under the rest of backward, except the last one, which starts when backward ends.
- ZeRO-1 does DDP's all-reduce, then each rank updates its 1/N of the parameters and
  broadcasts them, one broadcast per parameter tensor, after the optimizer: nothing hides it.
- FSDP2 (one unit per block, plus the root holding the rest) all-gathers each unit's
  parameters in forward, again in backward when ``reshard_after_forward`` (the root too:
  torchsmith passes the flag explicitly, which turns off FSDP2's keep-the-root-gathered
  default), and reduce-scatters each unit's gradients. The root's all-gathers (first in
  forward, first in backward) and its reduce-scatter (the last) have nothing to hide under;
  the blocks' collectives can run under forward and backward.

Step time = compute + exposed comm + the part of the hideable comm that does not fit
under its window. Overlap is an explicit assumption, :attr:`ScaleAssumptions.overlap`:
with it, hideable comm is hidden up to the window's length (the full-overlap bound);
without it, nothing is hidden (the no-overlap bound). Both bounds are always returned.
Compute at N ranks is the 1-rank compute, except that ZeRO-1 and FSDP2 run the optimizer
on 1/N of the parameters (optimizer time taken as proportional to parameters).

Memory per rank, for fp32 training (4 bytes per parameter and per gradient, K optimizer
bytes per parameter: K = 8 for Adam/AdamW's two fp32 moments). The issue's formulas for
mixed precision are DDP (2+2+K)Psi, ZeRO-1 4Psi + K Psi/N, FSDP (2+2+K)Psi/N plus
activations; here, with W = 4 Psi the weights:

- DDP: W + K Psi + bucket + T
- ZeRO-1: W + K Psi / N + bucket + T
- FSDP2: (W + K Psi) / N + unsharded + T

where T = the 1-rank step's peak minus its weights and optimizer state (activations, the
gradients alive at the peak, temporaries); bucket = the flat gradient copy DDP keeps
(4 Psi, unless ``gradient_as_bucket_view``); unsharded = FSDP2's gathered working set, the
root unit plus two blocks (the one running and the one prefetched). Gradients are not
persistent state here: the engine's ``zero_grad(set_to_none=True)`` frees them between
steps, so they are part of T, which is kept whole under every strategy (the peak comes
around the start of backward, before most gradients exist, so sharding them saves little).

What this model leaves out
--------------------------
- Stragglers and rank-to-rank variance: every rank is taken to compute as fast as the one
  rank measured.
- Topology: one alpha-beta link between every pair of ranks. No NVLink-within-node versus
  network-between-nodes hierarchy, no switch oversubscription, no congestion.
- NCCL's tree and other non-ring algorithms (lower latency at large N), gloo's own choice
  of algorithm (absorbed into each collective's fitted alpha and beta, at the fitted rank
  count only: past it, every collective follows the ring formulas over the assumed link),
  protocol switches between small and large messages.
- Compute slowed down by communication contending for the same cores or memory bandwidth
  (on a CPU host, gloo's threads share the ranks' cores), and, unless the profile was measured
  beside copies of itself, by the other ranks' compute on the same host; other tenants.
- Mixed precision, except for step time under two settings (``ScaleAssumptions``): 16-bit
  gradient compression halves DDP's all-reduce bytes, and FSDP2's bf16 policy halves the
  gathers and computes at the pace of a measured bf16-matmul step (a stand-in: FSDP2 casts
  every parameter, that step only Linear and Conv weights). Memory takes weights, gradients
  and buckets in the parameters' own dtype.
- Work a strategy does only at N > 1 besides the collectives themselves: FSDP2's copy-in and
  copy-out of every gathered and reduce-scattered buffer (on a CPU, on the ranks' own cores),
  DDP's copies into and out of its buckets. A world-size-1 run does not show them.
- Data loading, evaluation, checkpoints, and DDP's first-iteration bucket rebuild.
- Broadcast trees: a broadcast is costed as an all-gather, (N-1) alpha each, where a tree
  pays log2(N) alpha; ZeRO-1's one broadcast per parameter tensor is therefore overestimated
  at large N. Also the all-reduce of the loss for logging, and
  allocator fragmentation or caching (CUDA's reserved-but-unallocated memory).

Example::

    pred = predict("fsdp2", 64, profile=profile, shape=shape, link=parse_interconnect("100Gbps,5us"))
    pred.step.predicted_seconds, pred.memory.peak_bytes
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from torch import nn

from torchsmith.distributed.alpha_beta import Collective, Link, Links, collective_seconds
from torchsmith.structure import discover

Strategy = Literal["ddp", "zero1", "fsdp2"]
STRATEGIES: tuple[Strategy, ...] = ("ddp", "zero1", "fsdp2")
Window = Literal["none", "backward", "forward_backward"]


@dataclass(frozen=True, kw_only=True)
class StepProfile:
    """One rank's measured step on the per-rank micro-batch (a 1-rank run, no process group needed)."""

    forward_seconds: float
    """Median forward (with the loss) time of a step, alone or beside copies (see the module docstring)."""
    backward_seconds: float
    """Median backward time: the window DDP's bucket all-reduces can hide under."""
    optimizer_seconds: float
    """Median optimizer step (plus zero_grad): what ZeRO-1 and FSDP2 divide by N."""
    peak_bytes: int
    """Peak memory of a steady step (weights, optimizer state, activations, gradients, temporaries)."""
    optimizer_state_bytes: int
    """Bytes of optimizer state at that peak (K * Psi; Adam/AdamW fp32: 8 Psi)."""
    bf16_forward_backward_seconds: float | None = None
    """Forward + backward with bf16 matmuls (``Plan(precision=BF16Params())``), where bf16 is native:
    the compute FSDP2's bf16 ``MixedPrecisionPolicy`` is predicted at. None where not measured."""

    @property
    def compute_seconds(self) -> float:
        return self.forward_seconds + self.backward_seconds + self.optimizer_seconds


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """The parameter bytes a strategy communicates and keeps, from the model itself."""

    tensor_bytes: tuple[int, ...]
    """Bytes of each parameter tensor, in ``model.parameters()`` order (shared ones once)."""
    block_bytes: tuple[int, ...]
    """Parameter bytes of each repeated block, in forward order: FSDP2's units besides the root.
    Empty when the model has no unique block list (FSDP2 then has the root only)."""

    @property
    def param_bytes(self) -> int:
        """All parameter bytes: W."""
        return sum(self.tensor_bytes)

    @property
    def root_bytes(self) -> int:
        """Parameter bytes outside the blocks (embeddings, head, final norm): FSDP2's root unit."""
        return self.param_bytes - sum(self.block_bytes)


def model_shape(model: nn.Module, *, blocks: str | None = None) -> ModelShape:
    """The :class:`ModelShape` of ``model``, its blocks found as FSDP2 finds them.

    >>> model_shape(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))).block_bytes
    (80, 80)
    """
    params = list(dict.fromkeys(model.parameters()))  # a tied parameter is one tensor
    found = discover(model, blocks=blocks)
    units = found.block_items("FSDP2") if found.blocks is not None else []
    seen: set[int] = set()
    block_bytes = []
    for _, block in units:
        fresh = [p for p in block.parameters() if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        block_bytes.append(sum(p.numel() * p.element_size() for p in fresh))
    return ModelShape(tensor_bytes=tuple(p.numel() * p.element_size() for p in params),
                      block_bytes=tuple(block_bytes))


@dataclass(frozen=True, kw_only=True)
class ScaleAssumptions:
    """The settings the prediction depends on that are not measured."""

    overlap: bool = True
    """Hideable communication runs under compute (up to the window's length). True fits NCCL,
    which communicates on its own SMs and copy engines; False fits gloo on a CPU whose cores are
    all busy computing (ranks x threads >= cores), where transfers and reductions take the
    compute's cores. Both bounds are reported either way."""
    bucket_cap_bytes: int = 25 * 2**20
    """DDP's ``bucket_cap_mb`` in bytes (PyTorch's default: 25 MiB)."""
    gradient_as_bucket_view: bool = False
    """DDP's flag: True, the gradients live in the buckets, so no flat copy of them is kept."""
    reshard_after_forward: bool = True
    """FSDP2's flag: True, every unit (root included) is all-gathered again in backward."""
    prefetched_blocks: int = 2
    """FSDP2 blocks gathered at once at the peak: the one running and the one prefetched."""
    compressed_gradients: bool = False
    """DDP's fp16 or bf16 comm hook: every all-reduce carries 2 bytes per 4-byte gradient."""
    bf16_compute: bool = False
    """FSDP2's bf16 ``MixedPrecisionPolicy``: parameters gathered in bf16 (half the bytes), forward
    and backward at the profile's bf16 pace, gradients reduced in fp32 (the full bytes). Step
    time only: memory is predicted as for fp32 parameters."""

    def __post_init__(self) -> None:
        if self.bucket_cap_bytes <= 0 or self.prefetched_blocks < 0:
            raise ValueError(f"ScaleAssumptions needs bucket_cap_bytes > 0 and prefetched_blocks >= 0; found "
                             f"{self.bucket_cap_bytes} and {self.prefetched_blocks}.")


@dataclass(frozen=True)
class CommCall:
    """One collective of a step and the compute it can hide under."""

    collective: Collective
    nbytes: int
    """Full-buffer bytes (alpha_beta's convention)."""
    window: Window
    """``"none"``: nothing to hide under; else the phase it can overlap with."""


def ddp_buckets(tensor_bytes: Sequence[int], cap_bytes: int) -> list[int]:
    """Bucket sizes in the order backward fills them: parameters in reverse, a bucket closed once
    it reaches ``cap_bytes`` (as DDP assigns them; its smaller first bucket is left out).

    >>> ddp_buckets([10, 10, 10], 15)
    [20, 10]
    """
    buckets, current = [], 0
    for size in reversed(tensor_bytes):
        current += size
        if current >= cap_bytes:
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def comm_calls(strategy: Strategy, shape: ModelShape, cfg: ScaleAssumptions) -> list[CommCall]:
    """The collectives one optimizer step of ``strategy`` issues, with their overlap windows."""
    if strategy in ("ddp", "zero1"):
        buckets = ddp_buckets(shape.tensor_bytes, cfg.bucket_cap_bytes)
        wire = 2 if cfg.compressed_gradients else 1  # 16-bit on the wire: half the bytes
        calls = [CommCall("all_reduce", b // wire, "backward" if i < len(buckets) - 1 else "none")
                 for i, b in enumerate(buckets)]
        if strategy == "zero1":
            calls += [CommCall("broadcast", b, "none") for b in shape.tensor_bytes]
        return calls
    if strategy == "fsdp2":
        hidden: Window = "forward_backward"
        gather = 2 if cfg.bf16_compute else 1  # bf16 parameters: half the bytes gathered
        calls = [CommCall("all_gather", shape.root_bytes // gather, "none")]
        calls += [CommCall("all_gather", b // gather, hidden) for b in shape.block_bytes]
        if cfg.reshard_after_forward:
            calls.append(CommCall("all_gather", shape.root_bytes // gather, "none"))
            calls += [CommCall("all_gather", b // gather, hidden) for b in shape.block_bytes]
        calls += [CommCall("reduce_scatter", b, hidden) for b in shape.block_bytes]
        calls.append(CommCall("reduce_scatter", shape.root_bytes, "none"))
        return calls
    raise ValueError(f"unknown strategy {strategy!r}.\nTip: use one of {', '.join(STRATEGIES)}.")


@dataclass(frozen=True, kw_only=True)
class StepPrediction:
    """Step time at N ranks, split into its parts, with both overlap bounds."""

    compute_seconds: float
    """Forward + backward + optimizer (divided by N for ZeRO-1 and FSDP2)."""
    exposed_comm_seconds: float
    """Collectives with nothing to hide under."""
    hideable_comm_seconds: float
    """Collectives that can run under forward/backward."""
    full_overlap_seconds: float
    """Lower bound: hideable comm hidden up to its window's length."""
    no_overlap_seconds: float
    """Upper bound: every collective adds to the step."""
    predicted_seconds: float
    """The bound :attr:`ScaleAssumptions.overlap` picks."""

    @property
    def comm_share(self) -> float:
        """Communication's share of the no-overlap step."""
        comm = self.exposed_comm_seconds + self.hideable_comm_seconds
        return comm / self.no_overlap_seconds if self.no_overlap_seconds > 0 else 0.0


def predict_step(strategy: Strategy, ranks: int, *, profile: StepProfile, shape: ModelShape, link: Link | Links,
                 cfg: ScaleAssumptions = ScaleAssumptions()) -> StepPrediction:
    """Step seconds of ``strategy`` at ``ranks`` ranks (see the module docstring for the model)."""
    _check_ranks(ranks)
    sharded_optimizer = strategy in ("zero1", "fsdp2")
    forward, backward = _forward_backward(strategy, profile, cfg)
    compute = forward + backward + profile.optimizer_seconds / (ranks if sharded_optimizer else 1)
    windows = {"backward": backward, "forward_backward": forward + backward}
    exposed, hideable = 0.0, dict.fromkeys(windows, 0.0)
    for call in comm_calls(strategy, shape, cfg):
        seconds = collective_seconds(call.collective, ranks=ranks, nbytes=call.nbytes, link=link)
        if call.window == "none":
            exposed += seconds
        else:
            hideable[call.window] += seconds
    total_hideable = sum(hideable.values())
    not_hidden = sum(max(0.0, hideable[w] - windows[w]) for w in windows)
    full = compute + exposed + not_hidden
    none = compute + exposed + total_hideable
    return StepPrediction(compute_seconds=compute, exposed_comm_seconds=exposed,
                          hideable_comm_seconds=total_hideable, full_overlap_seconds=full,
                          no_overlap_seconds=none, predicted_seconds=full if cfg.overlap else none)


def _forward_backward(strategy: Strategy, profile: StepProfile, cfg: ScaleAssumptions) -> tuple[float, float]:
    """Forward and backward seconds: the profile's, or under FSDP2's bf16 compute its bf16 pace
    (split between them as the fp32 step splits)."""
    if not (cfg.bf16_compute and strategy == "fsdp2"):
        return profile.forward_seconds, profile.backward_seconds
    if profile.bf16_forward_backward_seconds is None:
        raise ValueError("bf16 compute needs the profile's bf16_forward_backward_seconds, and it was not measured.\n"
                         "Tip: harness.scale_inputs measures it on devices with native bf16.")
    fp32 = profile.forward_seconds + profile.backward_seconds
    scale = profile.bf16_forward_backward_seconds / fp32 if fp32 > 0 else 1.0
    return profile.forward_seconds * scale, profile.backward_seconds * scale


@dataclass(frozen=True, kw_only=True)
class MemoryPrediction:
    """Per-rank peak bytes at N ranks, split into the formula's parts."""

    weights_bytes: int
    """Parameters this rank holds between steps (W, or W/N sharded)."""
    optimizer_bytes: int
    """Optimizer state this rank holds (K Psi, or K Psi/N sharded)."""
    extra_bytes: int
    """DDP's flat gradient buckets, or FSDP2's gathered working set."""
    transient_bytes: int
    """T: the 1-rank step's peak above its weights and optimizer state."""

    @property
    def peak_bytes(self) -> int:
        return self.weights_bytes + self.optimizer_bytes + self.extra_bytes + self.transient_bytes


def predict_memory(strategy: Strategy, ranks: int, *, profile: StepProfile, shape: ModelShape,
                   cfg: ScaleAssumptions = ScaleAssumptions()) -> MemoryPrediction:
    """Per-rank peak memory of ``strategy`` at ``ranks`` ranks (formulas in the module docstring)."""
    _check_ranks(ranks)
    weights, state = shape.param_bytes, profile.optimizer_state_bytes
    transient = profile.peak_bytes - weights - state
    if transient < 0:
        raise ValueError(f"the 1-rank peak ({profile.peak_bytes} B) is below its weights ({weights} B) plus "
                         f"optimizer state ({state} B); the measurement missed part of the live state.\n"
                         "Tip: track the step's peak with live=(model, optimizer) after a warm-up step.")
    bucket = 0 if cfg.gradient_as_bucket_view else weights  # gradients: one per parameter, same dtype
    if strategy == "ddp":
        return MemoryPrediction(weights_bytes=weights, optimizer_bytes=state, extra_bytes=bucket,
                                transient_bytes=transient)
    if strategy == "zero1":
        return MemoryPrediction(weights_bytes=weights, optimizer_bytes=math.ceil(state / ranks),
                                extra_bytes=bucket, transient_bytes=transient)
    if strategy == "fsdp2":
        largest = max(shape.block_bytes, default=0)
        gathered = shape.root_bytes + min(cfg.prefetched_blocks, len(shape.block_bytes)) * largest
        return MemoryPrediction(weights_bytes=math.ceil(weights / ranks), optimizer_bytes=math.ceil(state / ranks),
                                extra_bytes=gathered if ranks > 1 else 0, transient_bytes=transient)
    raise ValueError(f"unknown strategy {strategy!r}.\nTip: use one of {', '.join(STRATEGIES)}.")


@dataclass(frozen=True, kw_only=True)
class ScaleRow:
    """One row of ``tune --json``'s ``scale``: a strategy at a rank count, predicted and (maybe) measured."""

    ranks: int
    strategy: Strategy
    predicted_step_seconds: float
    predicted_peak_bytes: int
    measured_step_seconds: float | None = None
    """None where this rank count was not run."""
    measured_peak_bytes: int | None = None
    """None where this rank count was not run."""
    predicted_comm_share: float | None = None
    """Communication's share of the no-overlap step (:attr:`StepPrediction.comm_share`): every
    collective, hidden or not, over compute plus every collective."""

    def to_json(self) -> dict[str, Any]:
        """A plain dict (JSON types only), the measured fields None where not measured."""
        return asdict(self)

    def step_error(self) -> float | None:
        """(predicted - measured) / measured step time; None when not measured."""
        return _relative(self.predicted_step_seconds, self.measured_step_seconds)

    def peak_error(self) -> float | None:
        """(predicted - measured) / measured peak bytes; None when not measured."""
        return _relative(self.predicted_peak_bytes, self.measured_peak_bytes)


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Both halves of a prediction for one strategy at one rank count."""

    strategy: Strategy
    ranks: int
    step: StepPrediction
    memory: MemoryPrediction

    def row(self, *, measured_step_seconds: float | None = None, measured_peak_bytes: int | None = None) -> ScaleRow:
        return ScaleRow(ranks=self.ranks, strategy=self.strategy, predicted_step_seconds=self.step.predicted_seconds,
                        predicted_peak_bytes=self.memory.peak_bytes, measured_step_seconds=measured_step_seconds,
                        measured_peak_bytes=measured_peak_bytes,
                        predicted_comm_share=self.step.comm_share)


def predict(strategy: Strategy, ranks: int, *, profile: StepProfile, shape: ModelShape, link: Link | Links,
            cfg: ScaleAssumptions = ScaleAssumptions()) -> Prediction:
    """Step time and per-rank peak memory of ``strategy`` at ``ranks`` ranks."""
    return Prediction(strategy=strategy, ranks=ranks,
                      step=predict_step(strategy, ranks, profile=profile, shape=shape, link=link, cfg=cfg),
                      memory=predict_memory(strategy, ranks, profile=profile, shape=shape, cfg=cfg))


def predict_table(ranks: Iterable[int], *, profile: StepProfile, shape: ModelShape, link: Link,
                  cfg: ScaleAssumptions = ScaleAssumptions(),
                  strategies: Sequence[Strategy] = STRATEGIES) -> list[Prediction]:
    """:func:`predict` for every strategy at every rank count, ranks outermost."""
    return [predict(s, n, profile=profile, shape=shape, link=link, cfg=cfg) for n in ranks for s in strategies]


def _check_ranks(ranks: int) -> None:
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1; found {ranks}.")


def _relative(predicted: float, measured: float | None) -> float | None:
    if measured is None or measured == 0:
        return None
    return (predicted - measured) / measured
