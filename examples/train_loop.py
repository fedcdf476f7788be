"""A plain PyTorch loop that andrea-console operates (loss on the dashboard, c: checkpoint, s: stop).

    python examples/train_loop.py runs/loop [--steps N]      # then: andrea-console runs/loop
"""
import argparse
import os

import torch

import rundir

args = argparse.ArgumentParser()
args.add_argument("run_dir")
args.add_argument("--steps", type=int, default=3000)
args = args.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)                  # a tiny model: more threads only contend
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4096, 32)
y = x.sin().sum(1, keepdim=True)

with rundir.open_run(args.run_dir, config={"lr": 1e-3, "hidden": 64, "batch": 64}) as run:
    for step in range(1, args.steps + 1):
        batch = torch.randint(0, len(x), (64,))
        loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        run.log(step, loss=loss.item(), lr=1e-3, grad_norm=grad_norm.item(), tokens=step * 64)
        if run.checkpoint_requested:            # c in the console (SIGUSR1), or a stop
            path = run.path / f"step-{step}.pt"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, f"{path}.tmp")
            os.replace(f"{path}.tmp", path)     # whole under its name, or not there
            run.checkpoint_saved(step, path)
        if run.stop_requested:                  # s in the console (SIGTERM), or Ctrl-C
            break
