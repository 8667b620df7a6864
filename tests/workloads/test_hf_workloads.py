"""The hf-* built-in workloads: registered, deterministic, dict batches, learnable, and one clear line
without the optional extra."""

from __future__ import annotations

import sys

import pytest
import torch

from torchsmith.workload import BUILTIN_WORKLOADS, WorkloadError, load_workload

pytest.importorskip("transformers")
from torchsmith.workloads import hf  # noqa: E402

# Tiny versions of each workload: a build and a step well under a second on one core.
TINY = {
    "hf-gpt2": lambda seed=0: hf.gpt2(seed, n_layer=2, n_embd=32, n_head=2, vocab=64, seq=16, batch_size=4,
                                      batches_per_epoch=3),
    "hf-llama": lambda seed=0: hf.llama(seed, n_layer=2, hidden=32, heads=4, kv_heads=2, vocab=64, seq=16,
                                        batch_size=4, batches_per_epoch=3),
    "hf-vit": lambda seed=0: hf.vit(seed, n_layer=2, hidden=32, heads=2, image=16, patch=8, batch_size=4,
                                    batches_per_epoch=3),
    "hf-resnet": lambda seed=0: hf.resnet(seed, widths=(8, 16), depths=(1, 1), image=16, batch_size=4,
                                          batches_per_epoch=3),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: steadier on 2 shared cores


def test_registered_and_named():
    for name in TINY:
        assert BUILTIN_WORKLOADS[name].startswith("torchsmith.workloads.hf:")
    w = load_workload("hf-resnet")
    assert w.name == "hf-resnet" and w.samples_per_batch == 32


@pytest.mark.parametrize("name", list(TINY))
def test_dict_batches_deterministic_per_epoch(name):
    a, b = TINY[name](0), TINY[name](0)
    first = next(iter(a.iter_batches()))
    assert set(first) == ({"input_ids", "labels"} if "gpt2" in name or "llama" in name else {"pixel_values", "labels"})
    assert all(torch.equal(first[k], next(iter(b.iter_batches()))[k]) for k in first)
    a.batches.set_epoch(1)
    assert not torch.equal(next(iter(a.iter_batches()))["labels"], first["labels"])
    assert len(list(a.iter_batches())) == 3 and len(list(a.iter_eval_batches())) == 2


@pytest.mark.parametrize("name", list(TINY))
def test_loss_is_the_models_own_and_falls(name):
    w = TINY[name]()
    torch.manual_seed(0)
    model = w.model()
    opt = w.optimizer(model.parameters())
    for g in opt.param_groups:
        g["lr"] = 1e-2
    batch = next(iter(w.iter_batches()))
    losses = []
    for _ in range(8):  # the same batch: a learnable signal shows as a falling loss
        loss = w.loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_gpt2_head_is_tied_and_llama_uses_grouped_kv():
    gpt2 = TINY["hf-gpt2"]().model()
    assert gpt2.lm_head.weight is gpt2.transformer.wte.weight
    llama = TINY["hf-llama"]().model()
    assert llama.config.num_key_value_heads < llama.config.num_attention_heads


def test_without_transformers_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    with pytest.raises(WorkloadError) as err:
        load_workload("hf-gpt2")
    message = str(err.value)
    assert "\n" not in message and "pip install 'torchsmith[hf]'" in message
