"""The alpha-beta (latency-bandwidth) cost model of collectives, and its fit to measurements.

A message of ``B`` bytes between two ranks costs ``alpha + B * beta``: a fixed latency
``alpha`` (seconds) plus ``beta`` seconds per byte (1 / bandwidth). The ring algorithms
move a collective's buffer in ``N - 1`` steps of ``B / N`` bytes each (Thakur, Rabenseifner
and Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005;
Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
JPDC 2009), so for ``N`` ranks and a buffer of ``B`` bytes:

- all_reduce (reduce-scatter, then all-gather): ``2(N-1) alpha + 2(N-1)/N * B * beta``;
- all_gather and reduce_scatter: ``(N-1) alpha + (N-1)/N * B * beta``, ``B`` the full
  (gathered, or not yet scattered) buffer;
- broadcast: costed as an all_gather of ``B`` (a pipelined broadcast moves the same
  bytes per link; tree broadcasts are left out);
- one rank: 0, there is no one to talk to.

:func:`fit_link` turns measured collective times into a :class:`Link` by least squares on
these formulas; :func:`fit_links` fits one per collective, for a backend whose collectives do
not all follow the ring formulas (gloo on loopback); :func:`parse_interconnect` reads an
assumed one (``"100Gbps,5us"``).

Example::

    link = parse_interconnect("100Gbps,5us")
    collective_seconds("all_reduce", ranks=8, nbytes=100 * 2**20, link=link)   # ~0.0147 s
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
COLLECTIVES: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@dataclass(frozen=True, kw_only=True)
class Link:
    """One alpha-beta link: every pair of ranks is joined by a link like this (no hierarchy)."""

    alpha_seconds: float
    """Latency of one message step, in seconds: what a zero-byte message costs."""
    beta_seconds_per_byte: float
    """Seconds per byte on the wire: 1 / bandwidth. 100 Gbit/s is 8e-11 s/B."""

    def __post_init__(self) -> None:
        for name in ("alpha_seconds", "beta_seconds_per_byte"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Link.{name} must be finite and >= 0; found {value}.\n"
                                 "Tip: parse one with parse_interconnect('100Gbps,5us').")

    @property
    def bandwidth_bytes_per_second(self) -> float:
        """1 / beta; infinite for a free link."""
        return math.inf if self.beta_seconds_per_byte == 0 else 1 / self.beta_seconds_per_byte

    def describe(self) -> str:
        """``'12.5 GB/s, 5 us'``: the bandwidth in bytes per second and the latency."""
        return f"{self.bandwidth_bytes_per_second / 1e9:.3g} GB/s, {self.alpha_seconds * 1e6:.3g} us"


# Bandwidth units, in bytes per second per unit. Case matters: b = bit, B = byte.
_BANDWIDTH = {"Tbps": 1e12 / 8, "Gbps": 1e9 / 8, "Mbps": 1e6 / 8, "Kbps": 1e3 / 8,
              "TBps": 1e12, "GBps": 1e9, "MBps": 1e6, "KBps": 1e3}
_LATENCY = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]+)\s*$")
_FORM = ("Tip: give bandwidth and latency separated by a comma, e.g. '100Gbps,5us' "
         "(bandwidth in Gbps/Mbps bits or GBps/MBps bytes per second; latency in s, ms, us or ns).")


def parse_interconnect(text: str) -> Link:
    """``"100Gbps,5us"`` -> ``Link`` (either order; bits ``Gbps``/``Mbps`` or bytes ``GBps``/``MBps``).

    >>> parse_interconnect("100Gbps,5us").describe()
    '12.5 GB/s, 5 us'
    """
    parts = [p for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"interconnect {text!r}: expected two parts (bandwidth, latency), found {len(parts)}.\n"
                         + _FORM)
    bandwidth = latency = None
    for part in parts:
        match = _NUMBER_UNIT.match(part)
        if match is None:
            raise ValueError(f"interconnect {text!r}: {part.strip()!r} is not a number followed by a unit.\n" + _FORM)
        value, unit = float(match.group(1)), match.group(2)
        if unit in _BANDWIDTH and bandwidth is None:
            bandwidth = value * _BANDWIDTH[unit]
        elif unit in _LATENCY and latency is None:
            latency = value * _LATENCY[unit]
        else:
            raise ValueError(f"interconnect {text!r}: unit {unit!r} is not a bandwidth unit "
                             f"({', '.join(_BANDWIDTH)}) or a latency unit ({', '.join(_LATENCY)}), "
                             "or it names the same quantity twice.\n" + _FORM)
    assert bandwidth is not None and latency is not None  # two parts, two different kinds
    if bandwidth <= 0:
        raise ValueError(f"interconnect {text!r}: bandwidth must be above 0.\n" + _FORM)
    return Link(alpha_seconds=latency, beta_seconds_per_byte=1 / bandwidth)


def coefficients(collective: Collective, ranks: int, nbytes: float) -> tuple[float, float]:
    """``(a, b)`` such that the collective costs ``a * alpha + b * beta`` (the design-matrix row).

    >>> coefficients("all_reduce", 4, 1000)
    (6.0, 1500.0)
    """
    if ranks < 1:
        raise ValueError(f"a collective needs at least 1 rank; found ranks={ranks}.")
    if nbytes < 0:
        raise ValueError(f"a collective moves >= 0 bytes; found nbytes={nbytes}.")
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}.\nTip: use one of {', '.join(COLLECTIVES)}.")
    steps = ranks - 1  # 0 for one rank: no cost at all
    share = steps / ranks * nbytes
    if collective == "all_reduce":
        return 2.0 * steps, 2.0 * share
    return float(steps), share


Links = Mapping[Collective, Link]
"""One link per collective, as :func:`fit_links` returns them."""


def collective_seconds(collective: Collective, *, ranks: int, nbytes: float, link: Link | Links) -> float:
    """Ring-algorithm time of one collective over a buffer of ``nbytes`` on ``ranks`` ranks,
    over one link for every collective or over ``link[collective]``.

    >>> collective_seconds("all_gather", ranks=1, nbytes=1e9, link=parse_interconnect("1Gbps,1ms"))
    0.0
    """
    own = link if isinstance(link, Link) else link[collective]
    a, b = coefficients(collective, ranks, nbytes)
    return a * own.alpha_seconds + b * own.beta_seconds_per_byte


@dataclass(frozen=True, kw_only=True)
class CollectiveSample:
    """One measured collective: what ran, on how many ranks, over how many bytes, how long."""

    ranks: int
    """Ranks in the process group that ran it."""
    collective: Collective
    """Which collective."""
    nbytes: int
    """Bytes of the full buffer (as in :func:`coefficients`)."""
    seconds: float
    """Measured wall time of one call (a median over repeats)."""


@dataclass(frozen=True, kw_only=True)
class LinkFit:
    """A fitted link and how well the formulas explain the samples it came from."""

    link: Link
    relative_residual: float
    """Root-mean-square of (predicted - measured) / measured over the samples: 0.1 means the
    model is typically 10% off a measured collective time."""
    max_relative_error: float
    """The worst sample's |predicted - measured| / measured."""
    samples: int
    """How many samples were fitted."""
    bias_by_collective: dict[str, float]
    """Mean of (predicted - measured) / measured per collective: where one link misfits a backend
    whose collectives do not follow the ring formulas (e.g. -0.4: the model is 40% fast for it)."""


def fit_link(samples: Sequence[CollectiveSample]) -> LinkFit:
    """Least-squares alpha and beta (both >= 0) from measured collectives.

    Each sample is one row ``a * alpha + b * beta = seconds`` of the design matrix from
    :func:`coefficients`. Rows are weighted by ``1 / seconds``, so the fit minimises relative
    error: the samples span several decades of size, and an unweighted fit would let the
    largest messages decide alone and leave the latency of small ones unfitted. With two
    unknowns, the non-negative least-squares solution is the unconstrained one if both are
    >= 0, else the better of the two one-parameter fits (alpha = 0 or beta = 0).

    >>> truth = Link(alpha_seconds=1e-4, beta_seconds_per_byte=1e-9)
    >>> s = [CollectiveSample(ranks=2, collective="all_reduce", nbytes=n,
    ...      seconds=collective_seconds("all_reduce", ranks=2, nbytes=n, link=truth)) for n in (1e3, 1e6)]
    >>> round(fit_link(s).link.alpha_seconds, 8)
    0.0001
    """
    kept = [s for s in samples if s.ranks > 1]  # one-rank samples cost 0 and say nothing
    rows = [(coefficients(s.collective, s.ranks, s.nbytes), s.seconds) for s in kept]
    if len(rows) < 2:
        raise ValueError(f"fitting alpha and beta needs >= 2 samples on >= 2 ranks; found {len(rows)}.\n"
                         "Tip: benchmark at least two buffer sizes in a process group of 2 or more ranks.")
    bad = [t for _, t in rows if not (math.isfinite(t) and t > 0)]
    if bad:
        raise ValueError(f"measured collective times must be finite and > 0 seconds; found {bad[:3]}.\n"
                         "Tip: time each collective with a monotonic clock after a barrier.")
    seconds = np.array([t for _, t in rows])
    design = np.array([ab for ab, _ in rows]) / seconds[:, None]  # weighted: relative error
    target = np.ones(len(rows))
    candidates = []
    full, *_ = np.linalg.lstsq(design, target, rcond=None)
    if (full >= 0).all():
        candidates.append(full)
    for keep in (0, 1):  # the other parameter clamped at 0
        column = design[:, keep]
        norm = float(column @ column)
        x = np.zeros(2)
        x[keep] = max(0.0, float(column @ target) / norm) if norm > 0 else 0.0
        candidates.append(x)
    best = min(candidates, key=lambda x: float(np.sum((design @ x - target) ** 2)))
    relative = design @ best - target
    bias: dict[str, float] = {c: float(np.mean([r for r, s in zip(relative, kept, strict=True) if s.collective == c]))
            for c in dict.fromkeys(s.collective for s in kept)}
    return LinkFit(link=Link(alpha_seconds=float(best[0]), beta_seconds_per_byte=float(best[1])),
                   relative_residual=float(np.sqrt(np.mean(relative ** 2))),
                   max_relative_error=float(np.max(np.abs(relative))), samples=len(rows), bias_by_collective=bias)


def fit_links(samples: Sequence[CollectiveSample]) -> dict[Collective, LinkFit]:
    """One fitted link per collective: its own samples where it has two sizes or more on more
    than one rank; else broadcast takes all_gather's (the formula it is costed by), and any
    other the joint fit of every sample.

    One link for every collective fitted gloo on loopback with a 50-57% relative residual
    (docs/scaling.md): its all_gather and reduce_scatter cost more, against its all_reduce, than
    the ring formulas' shares say, so a model of FSDP2 (all-gathers and reduce-scatters) on one
    link fitted mostly to all-reduces ran about half its measured time. Each collective's own
    alpha and beta absorb the backend's algorithm for it, at the rank count it was measured on.

    >>> truth = {"all_reduce": Link(alpha_seconds=1e-4, beta_seconds_per_byte=1e-9),
    ...          "all_gather": Link(alpha_seconds=3e-4, beta_seconds_per_byte=4e-9)}
    >>> s = [CollectiveSample(ranks=2, collective=c, nbytes=n,
    ...      seconds=collective_seconds(c, ranks=2, nbytes=n, link=truth[c])) for c in truth for n in (1e3, 1e6)]
    >>> links = fit_links(s)
    >>> round(links["all_gather"].link.beta_seconds_per_byte * 1e9, 6), links["broadcast"] is links["all_gather"]
    (4.0, True)
    """
    joint = fit_link(samples)
    fits: dict[Collective, LinkFit] = {}
    for collective in COLLECTIVES:
        own = [s for s in samples if s.collective == collective and s.ranks > 1]
        if len({s.nbytes for s in own}) >= 2:
            fits[collective] = fit_link(own)
    if "broadcast" not in fits and "all_gather" in fits:
        fits["broadcast"] = fits["all_gather"]
    return {c: fits.get(c, joint) for c in COLLECTIVES}


def links_of(fits: Mapping[Collective, LinkFit]) -> dict[Collective, Link]:
    """The links of :func:`fit_links`' fits, for :func:`collective_seconds` and the scale model."""
    return {c: f.link for c, f in fits.items()}
