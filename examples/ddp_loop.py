"""A plain DDP loop on the run API, every rank calling open_run (andrea-console operates it: c, s).

    torchrun --standalone --nproc_per_node=2 examples/ddp_loop.py runs/ddp [--steps N]
    andrea-console runs/ddp

Rank 0 owns the run directory (history, events, .trainer.json); every rank logs, reads the
same decision at the same step and writes its part of each checkpoint: rank 0 the model and
the optimizer, every rank its own data order (``rank-R.pt``). ``kill -USR2`` a rank to print
its Python stacks (a stuck job's, say) on stderr.
"""
import argparse
import faulthandler
import gc
import os
import signal

import torch
import torch.distributed as dist
import torch.distributed.nn.functional  # noqa: F401  (before the group exists: see the end)
from torch.nn.parallel import DistributedDataParallel

import rundir

faulthandler.register(signal.SIGUSR2, all_threads=True)
args = argparse.ArgumentParser()
args.add_argument("run_dir")
args.add_argument("--steps", type=int, default=2000)
args.add_argument("--batch", type=int, default=32)
args = args.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
torch.set_num_threads(1)                  # a tiny model: more threads only contend
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4096, 32)
y = x.sin().sum(1, keepdim=True)
order = torch.Generator().manual_seed(1000 + rank)     # this rank's share of the data


def save(path, state):
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)       # whole under its name, or not there


try:
    with rundir.open_run(args.run_dir, config={"lr": 1e-3, "hidden": 64, "batch": args.batch * world}) as run:
        for step in range((run.last_step or 0) + 1, args.steps + 1):
            batch = torch.randint(0, len(x), (args.batch,), generator=order)
            loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.log(step, loss=loss.item(), lr=1e-3, tokens=step * args.batch * world)   # every rank
            if run.checkpoint_requested:        # the same answer on every rank, at this step
                part = run.path / f"step-{step}"
                part.mkdir(exist_ok=True)
                if run.is_owner:
                    save(part / "model.pt", {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                             "step": step})
                save(part / f"rank-{rank}.pt", {"order": order.get_state(), "step": step})
                run.checkpoint_saved(step, part)    # every rank; rank 0 reports it once all have written
            if run.stop_requested:
                break
finally:
    # The group really destroyed (gloo's threads joined) while the interpreter is whole, so nothing
    # may still hold it: the model dropped, cycles collected (as trainer/distributed.py's close()).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()
    gc.collect()
