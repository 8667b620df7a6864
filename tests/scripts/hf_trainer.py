"""A tiny GPT-2 (random init from a small config) trained by the real Hugging Face Trainer, for
doctor's corpus and the script tuner's tests (--observe: what the script saw from inside).

The Trainer computes the loss inside the model, steps through Accelerate's wrapped optimizer
and reads a few scalars for its logs. GPT-2's GELU multiplies by Python floats (`0.5 * x`),
which the profiler records as `double` scalars: no float64 finding may come of it.

--planted: the optimizer is AdamW with foreach=False, one kernel per op per parameter tensor:
doctor's single-tensor-optimizer rule must find it.
"""

import argparse
import sys
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _observe import Observer  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--planted", action="store_true", help="AdamW(foreach=False) (doctor's single-tensor-optimizer rule)")
p.add_argument("--observe", default=None)
p.add_argument("--out", default=None, help="the Trainer's output_dir; a temporary directory when not given")
p.add_argument("--optim", default=None, help="TrainingArguments.optim; the Trainer's default when not given")
p.add_argument("--bf16", action="store_true")
p.add_argument("--small", action="store_true", help="the script tuner's size: compiles and trains in seconds")
args = p.parse_args()


class RandomTokens(Dataset):
    def __init__(self, n: int, length: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


# The default is the size doctor's corpus runs (docs/doctor.md shows its output); --small is the tuner's.
vocab, length, width, layers, heads = (64, 16, 32, 2, 2) if args.small else (512, 64, 128, 4, 4)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=length, n_embd=width, n_layer=layers, n_head=heads))
obs = Observer(args.observe)
obs.watch(model.transformer.h[0])
optimizers = (None, None)
if args.planted:
    optimizers = (torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False), None)


class Dump(TrainerCallback):
    def on_step_begin(self, a, state, control, **kw):
        if state.global_step >= 2:  # the injection's model knobs are on from step 2
            obs.dump(model, trainer.optimizer, blocks=model.transformer.h, loader=None, steps=state.global_step)


with tempfile.TemporaryDirectory() as tmp:
    optim = {"optim": args.optim} if args.optim else {}
    targs = TrainingArguments(output_dir=args.out or tmp, max_steps=args.steps, per_device_train_batch_size=4,
                              learning_rate=1e-3, logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True,
                              dataloader_num_workers=0, bf16=args.bf16, disable_tqdm=True, **optim)
    trainer = Trainer(model=model, args=targs, train_dataset=RandomTokens(512, length, vocab), optimizers=optimizers,
                      callbacks=[Dump()])
    trainer.train()
print(f"hf_trainer done: {trainer.state.global_step} steps")
