"""A Hugging Face Trainer (a tiny randomly initialised GPT-2) that andrea-console operates, through the callback.

    python examples/hf_trainer.py runs/hf [--steps N]      # then: andrea-console runs/hf
    torchrun --standalone --nproc_per_node=2 examples/hf_trainer.py runs/hf      # 2 CPU processes (gloo)

Under torchrun the callback runs on every rank: every rank opens the run, rank 0 writes it.
``kill -USR2`` on any rank prints its Python stack (a job that does not move says where).
"""
import argparse
import faulthandler
import os
import signal

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from rundir.integrations.transformers import RundirCallback


class RandomTokens(torch.utils.data.Dataset):
    """Sequences of random byte ids: enough for a loss that moves."""

    def __init__(self, n: int = 512, length: int = 32):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, length), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)              # a tiny model: more threads only contend
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    training = TrainingArguments(output_dir=os.path.join(args.run_dir, "checkpoints"), max_steps=args.steps,
                                 per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=1,
                                 save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(),
                      callbacks=[RundirCallback(args.run_dir)])
    trainer.train()


if __name__ == "__main__":
    main()
