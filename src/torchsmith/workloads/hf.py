"""Hugging Face ``transformers`` workloads: hf-gpt2, hf-llama, hf-vit, hf-resnet.

The models people actually train, built from small configs with random initialisation (no
download, no network) and fed synthetic data made on the fly from seeded generators:

* ``hf-gpt2``: ``GPT2LMHeadModel``, 4 layers, width 256, vocab 8192, embedding and LM head tied;
* ``hf-llama``: ``LlamaForCausalLM``, 4 layers, width 256, 8 query heads over 2 KV heads (GQA);
* ``hf-vit``: ``ViTForImageClassification``, 4 layers, width 192, 32x32 images in 4x4 patches;
* ``hf-resnet``: ``ResNetForImageClassification``, three stages of basic blocks, 32x32 images.

Batches are dicts, as the Hugging Face Trainer feeds them: ``{"input_ids", "labels"}`` for the
language models (the model shifts the labels itself) and ``{"pixel_values", "labels"}`` for the
image classifiers; the loss is the model's own, ``model(**batch).loss``. The synthetic data can
be learnt: token streams follow a fixed sparse bigram table (4 successors per token), images are
noisy copies of one fixed prototype per class.

``transformers`` is an optional extra (``pip install 'torchsmith[hf]'``), imported only when one
of these workloads is built.

Example::

    w = load_workload("hf-gpt2")
    batch = next(iter(w.iter_batches()))      # {"input_ids": (8, 128) int64, "labels": (8, 128) int64}
    loss = w.loss(w.model(), batch)           # GPT2LMHeadModel's own shifted cross-entropy
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from torchsmith.workload import Workload, WorkloadError
from torchsmith.workloads._batches import STREAM_DATA, STREAM_TRAIN_ORDER, STREAM_VAL, generator

__all__ = ["SyntheticBatches", "TokenStream", "ClassImages", "gpt2", "llama", "vit", "resnet", "hf_loss"]


def _transformers(name: str) -> Any:
    try:
        import transformers
    except ImportError:
        raise WorkloadError(f"{name} needs Hugging Face transformers, which is not installed. "
                            "Tip: pip install 'torchsmith[hf]'") from None
    # Tiny configs trip transformers' config warnings (e.g. GPT-2's default eos id 50256 > vocab).
    logging.getLogger("transformers").setLevel(logging.ERROR)
    return transformers


def hf_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's own loss: ``model(**batch).loss`` (labels inside the batch)."""
    return model(**batch).loss


class TokenStream:
    """Token sequences from a fixed sparse bigram table: ``(batch, seq)`` int64 ids per call.

    Each token has ``branching`` possible successors, drawn once from ``(seed, STREAM_DATA)``,
    so a model can learn the stream down to ``log(branching)`` nats per token.
    """

    def __init__(self, *, vocab: int, seq: int, batch: int, seed: int, branching: int = 4) -> None:
        self.vocab, self.seq, self.batch, self.branching = vocab, seq, batch, branching
        self.successors = torch.randint(0, vocab, (vocab, branching), generator=generator(seed, STREAM_DATA))

    def __call__(self, g: torch.Generator) -> dict[str, torch.Tensor]:
        ids = torch.empty(self.batch, self.seq, dtype=torch.long)  # (B, T)
        ids[:, 0] = torch.randint(0, self.vocab, (self.batch,), generator=g)
        choice = torch.randint(0, self.branching, (self.batch, self.seq), generator=g)
        for t in range(1, self.seq):
            ids[:, t] = self.successors[ids[:, t - 1], choice[:, t]]
        return {"input_ids": ids, "labels": ids.clone()}  # the model shifts labels by one itself


class ClassImages:
    """Images ``(batch, 3, size, size)``: a fixed prototype per class plus Gaussian noise."""

    def __init__(self, *, classes: int, size: int, batch: int, seed: int, noise: float = 1.0) -> None:
        self.classes, self.batch, self.noise = classes, batch, noise
        self.prototypes = torch.randn(classes, 3, size, size, generator=generator(seed, STREAM_DATA))

    def __call__(self, g: torch.Generator) -> dict[str, torch.Tensor]:
        labels = torch.randint(0, self.classes, (self.batch,), generator=g)
        pixels = self.prototypes[labels] + self.noise * torch.randn(self.prototypes[labels].shape, generator=g)
        return {"pixel_values": pixels, "labels": labels}  # (B, 3, H, W) float32, (B,) int64


class SyntheticBatches:
    """``num_batches`` batches per epoch, batch ``i`` of epoch ``e`` drawn from ``(seed, stream, e, i)``.

    Re-iterable and deterministic: a resumed run and every tuning candidate see the same batches.
    """

    def __init__(self, make: Callable[[torch.Generator], Any], *, num_batches: int, seed: int,
                 stream: int = STREAM_TRAIN_ORDER) -> None:
        self.make, self.num_batches, self.seed, self.stream = make, num_batches, seed, stream
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.num_batches):
            yield self.make(generator(self.seed, self.stream, self.epoch, i))


def _workload(name: str, *, seed: int, make: Any, build: Callable[[], nn.Module], lr: float,
              num_batches: int, batch: int, tokens: int | None, config: Any) -> Workload:
    return Workload(
        name=name, seed=seed, model=build, loss=hf_loss,
        batches=SyntheticBatches(make, num_batches=num_batches, seed=seed),
        eval_batches=list(SyntheticBatches(make, num_batches=2, seed=seed, stream=STREAM_VAL)),
        optimizer=lambda params: torch.optim.AdamW(params, lr=lr),
        samples_per_batch=batch, tokens_per_batch=tokens,
        extras={"config": config.to_dict(), "model_class": build.__name__},
    )


class _Build:
    """``model_class(config)``: a picklable factory whose name is the model class."""

    def __init__(self, model_class: type, config: Any) -> None:
        self.model_class, self.config, self.__name__ = model_class, config, model_class.__name__

    def __call__(self) -> nn.Module:
        return self.model_class(self.config)


def gpt2(seed: int = 0, *, n_layer: int = 4, n_embd: int = 256, n_head: int = 4, vocab: int = 8192,
         seq: int = 128, batch_size: int = 8, batches_per_epoch: int = 64, lr: float = 3e-4) -> Workload:
    """``hf-gpt2``: GPT2LMHeadModel with its embedding and LM head tied (one shared weight).

    >>> w = gpt2(n_layer=1, n_embd=32, vocab=64, seq=16)   # doctest: +SKIP
    >>> w.model().lm_head.weight is w.model().transformer.wte.weight  # doctest: +SKIP
    True
    """
    t = _transformers("hf-gpt2")
    # No dropout: the guard compares plans step by step, and eager and compiled code draw different masks.
    cfg = t.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=vocab, n_positions=seq,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                       bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)
    make = TokenStream(vocab=vocab, seq=seq, batch=batch_size, seed=seed)
    return _workload("hf-gpt2", seed=seed, make=make, build=_Build(t.GPT2LMHeadModel, cfg), lr=lr,
                     num_batches=batches_per_epoch, batch=batch_size, tokens=batch_size * seq, config=cfg)


def llama(seed: int = 0, *, n_layer: int = 4, hidden: int = 256, heads: int = 8, kv_heads: int = 2,
          vocab: int = 8192, seq: int = 128, batch_size: int = 8, batches_per_epoch: int = 64,
          lr: float = 3e-4) -> Workload:
    """``hf-llama``: LlamaForCausalLM with grouped-query attention (``heads`` over ``kv_heads``), untied head."""
    t = _transformers("hf-llama")
    cfg = t.LlamaConfig(num_hidden_layers=n_layer, hidden_size=hidden, num_attention_heads=heads,
                        num_key_value_heads=kv_heads, intermediate_size=hidden * 8 // 3 // 8 * 8,
                        vocab_size=vocab, max_position_embeddings=seq, use_cache=False,
                        bos_token_id=0, eos_token_id=0, pad_token_id=None, tie_word_embeddings=False)
    make = TokenStream(vocab=vocab, seq=seq, batch=batch_size, seed=seed)
    return _workload("hf-llama", seed=seed, make=make, build=_Build(t.LlamaForCausalLM, cfg), lr=lr,
                     num_batches=batches_per_epoch, batch=batch_size, tokens=batch_size * seq, config=cfg)


def vit(seed: int = 0, *, n_layer: int = 4, hidden: int = 192, heads: int = 3, image: int = 32, patch: int = 4,
        classes: int = 10, batch_size: int = 32, batches_per_epoch: int = 32, lr: float = 1e-3) -> Workload:
    """``hf-vit``: ViTForImageClassification on ``image x image`` inputs in ``patch x patch`` patches."""
    t = _transformers("hf-vit")
    cfg = t.ViTConfig(num_hidden_layers=n_layer, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=2 * hidden, image_size=image, patch_size=patch, num_labels=classes,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    make = ClassImages(classes=classes, size=image, batch=batch_size, seed=seed)
    return _workload("hf-vit", seed=seed, make=make, build=_Build(t.ViTForImageClassification, cfg), lr=lr,
                     num_batches=batches_per_epoch, batch=batch_size, tokens=None, config=cfg)


def resnet(seed: int = 0, *, widths: tuple[int, ...] = (32, 64, 128), depths: tuple[int, ...] = (1, 1, 1),
           image: int = 32, classes: int = 10, batch_size: int = 32, batches_per_epoch: int = 32,
           lr: float = 1e-3) -> Workload:
    """``hf-resnet``: ResNetForImageClassification with basic blocks, one stage per width."""
    t = _transformers("hf-resnet")
    cfg = t.ResNetConfig(embedding_size=widths[0], hidden_sizes=list(widths), depths=list(depths),
                         layer_type="basic", num_labels=classes)
    make = ClassImages(classes=classes, size=image, batch=batch_size, seed=seed)
    return _workload("hf-resnet", seed=seed, make=make, build=_Build(t.ResNetForImageClassification, cfg),
                     lr=lr, num_batches=batches_per_epoch, batch=batch_size, tokens=None, config=cfg)
