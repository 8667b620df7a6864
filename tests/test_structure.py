"""Structure discovery on the built-ins, on Hugging Face models (tiny configs) and on an ambiguous model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchsmith.structure import StructureError, discover, set_hint
from torchsmith.workload import Workload, load_workload


@pytest.mark.parametrize("name, blocks, head", [
    ("gpt-mini", "blocks", "lm_head"), ("cnn-mini", "blocks", "head"), ("mlp", "blocks", "head"),
])
def test_builtins(name, blocks, head):
    s = discover(load_workload(name).model())
    assert (s.blocks_path, s.head_path, s.tied) == (blocks, head, [])
    assert len(s.block_items("x")) == len(s.blocks) > 1


def _hf():
    return pytest.importorskip("transformers")


def test_gpt2_blocks_head_and_tie():
    t = _hf()
    model = t.GPT2LMHeadModel(t.GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                           bos_token_id=0, eos_token_id=0))
    s = discover(model)
    assert s.blocks_path == "transformer.h" and len(s.blocks) == 3
    assert s.head_path == "lm_head" and s.head is model.lm_head
    assert s.tied == [("transformer.wte.weight", "lm_head.weight")]
    assert [p for p, _ in s.block_items("x")] == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]


def test_llama():
    t = _hf()
    model = t.LlamaForCausalLM(t.LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=64, vocab_size=64))
    s = discover(model)
    assert (s.blocks_path, s.head_path, s.tied) == ("model.layers", "lm_head", [])
    assert type(s.blocks[0]).__name__ == "LlamaDecoderLayer"


def test_vit_and_resnet():
    t = _hf()
    vit = t.ViTForImageClassification(t.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64, image_size=16, patch_size=8, num_labels=5))
    s = discover(vit)
    assert type(s.blocks[0]).__name__ == "ViTLayer" and len(s.blocks) == 2 and s.head is vit.classifier
    resnet = t.ResNetForImageClassification(t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                           layer_type="basic", num_labels=5))
    s = discover(resnet)
    # The stages, not the pairs of conv layers nested inside each of them.
    assert s.blocks_path == "resnet.encoder.stages" and s.head_path == "classifier.1"
    assert s.candidates == ("resnet.encoder.stages (2 x ResNetStage)",)


class EncoderDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.decoder = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.out = nn.Linear(4, 3)


def test_ambiguous_lists_candidates_and_a_name_resolves_it():
    s = discover(EncoderDecoder())
    assert s.blocks is None and s.head_path == "out"
    listed = r"encoder \(2 x Linear\), decoder \(2 x Linear\)"
    with pytest.raises(StructureError, match=rf"(?s)ambiguous.*{listed}.*Tip:.*blocks="):
        s.block_items("activation checkpointing")
    assert discover(EncoderDecoder(), blocks="decoder").blocks_path == "decoder"
    with pytest.raises(StructureError, match=r"blocks='nope'.*found: encoder .*decoder"):
        discover(EncoderDecoder(), blocks="nope")
    with pytest.raises(StructureError, match=r"names a Linear"):
        discover(EncoderDecoder(), blocks="out")


def test_workload_names_blocks_and_head_for_every_model_it_builds():
    w = Workload(model=EncoderDecoder, batches=[], loss=lambda m, b: b, optimizer=torch.optim.SGD,
                 blocks="encoder", head="encoder.1")
    s = discover(w.model())
    assert (s.blocks_path, s.head_path) == ("encoder", "encoder.1")
    assert discover(set_hint(EncoderDecoder(), blocks="decoder")).blocks_path == "decoder"


def test_checkpointing_uses_the_named_blocks():
    from torchsmith.plan import CheckpointBlocks
    from torchsmith.transforms.activation_checkpoint import apply_checkpointing
    from torchsmith.transforms.base import TransformError

    with pytest.raises(TransformError, match="ambiguous"):
        apply_checkpointing(EncoderDecoder(), CheckpointBlocks(every=1))
    change = apply_checkpointing(set_hint(EncoderDecoder(), blocks="decoder"), CheckpointBlocks(every=1))
    assert change.targets == ["decoder.0", "decoder.1"]


def test_parameterless_lists_are_not_blocks():
    model = nn.Sequential(nn.ReLU(), nn.ReLU(), nn.ReLU())
    s = discover(model)
    assert s.blocks is None and "no nn.ModuleList" in s.problem


def test_a_run_of_blocks_inside_a_mixed_sequential_is_found():
    # nn.Sequential(*blocks, head), as small scripts (and a Lightning module of tests/scripts) write it.
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return x + self.fc(x)

    model = nn.Sequential(nn.Linear(4, 4), Block(), Block(), Block(), nn.Linear(4, 2))
    s = discover(model)
    assert s.blocks is model and s.block_range == (1, 4)
    assert [p for p, _ in s.block_items("checkpointing")] == ["1", "2", "3"]
    assert s.candidates == ("<model>[1:4] (3 x Block)",)
