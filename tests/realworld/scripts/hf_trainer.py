"""A tiny GPT-2 (random init from a small config) trained by the real Hugging Face Trainer.

The Trainer computes the loss inside the model, steps through Accelerate's wrapped optimizer
and reads a few scalars for its logs. GPT-2's GELU multiplies by Python floats (`0.5 * x`),
which the profiler records as `double` scalars: no float64 finding may come of it.

--planted: the optimizer is AdamW with foreach=False, one kernel per op per parameter tensor:
doctor's single-tensor-optimizer rule must find it.
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--planted", action="store_true")
args = parser.parse_args()


class RandomTokens(Dataset):
    def __init__(self, n: int, length: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
config = GPT2Config(vocab_size=512, n_positions=64, n_embd=128, n_layer=4, n_head=4)
model = GPT2LMHeadModel(config)
optimizers = (None, None)
if args.planted:
    optimizers = (torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False), None)
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=4, learning_rate=1e-3,
                              logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True,
                              dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=RandomTokens(512, 64, 512), optimizers=optimizers)
    trainer.train()
print(f"hf_trainer done: {trainer.state.global_step} steps")
