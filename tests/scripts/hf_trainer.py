"""A Hugging Face Trainer script (tiny GPT-2 from a config, random tokens) for the script-tuning tests."""

import argparse
import sys

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _observe import Observer  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--observe", default=None)
p.add_argument("--out", default="/tmp/torchsmith-hf-test")
p.add_argument("--optim", default="adamw_torch")
p.add_argument("--bf16", action="store_true")
args = p.parse_args()


class Tokens(Dataset):
    def __init__(self, n=256, t=16, vocab=64):
        self.x = torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2))
obs = Observer(args.observe)
obs.watch(model.transformer.h[0])
targs = TrainingArguments(output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=8, report_to=[],
                          save_strategy="no", logging_strategy="no", use_cpu=True, optim=args.optim, bf16=args.bf16,
                          disable_tqdm=True)
trainer = Trainer(model=model, args=targs, train_dataset=Tokens())


class Dump(TrainerCallback):
    def on_step_begin(self, a, state, control, **kw):
        if state.global_step >= 2:  # the injection's model knobs are on from step 2
            obs.dump(model, trainer.optimizer, blocks=model.transformer.h, loader=None, steps=state.global_step)


trainer.add_callback(Dump())
trainer.train()
