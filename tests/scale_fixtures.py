"""Synthetic scale-model inputs, made over a known link, for tests of the scale rows and the report."""

from __future__ import annotations

from torchsmith.distributed.alpha_beta import Link, collective_seconds

LINK = Link(alpha_seconds=20e-6, beta_seconds_per_byte=1e-9)  # what the synthetic samples are made with


def synthetic_scale_inputs() -> dict:
    """What tune's first round would write down: a one-rank profile, tensor and block sizes, and
    collective samples timed exactly as the alpha-beta model over ``LINK`` says."""
    samples = [{"ranks": 2, "collective": c, "nbytes": n,
                "seconds": collective_seconds(c, ranks=2, nbytes=n, link=LINK)}
               for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast") for n in (4096, 2**20, 2**24)]
    return {"profile": {"forward_seconds": 0.01, "backward_seconds": 0.02, "optimizer_seconds": 0.004,
                        "peak_bytes": 40 * 2**20, "optimizer_state_bytes": 16 * 2**20},
            "tensor_bytes": [2**20] * 8, "block_bytes": [2 * 2**20] * 3, "samples": samples}
