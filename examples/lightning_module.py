"""A Lightning module that andrea-console operates, through the callback.

    python examples/lightning_module.py runs/lightning [--steps N]      # then: andrea-console runs/lightning
    python examples/lightning_module.py runs/lightning --devices 2      # DDP: 2 CPU processes (gloo)
    sbatch examples/slurm/lightning.sbatch runs/lightning               # a job Lightning requeues itself

With ``--devices 2`` Lightning's launcher starts the second process (this script again), and
the callback, given once to the Trainer, runs on both: every rank opens the run, rank 0 writes
it. ``kill -USR2`` on any rank prints its Python stack (a job that does not move says where).
"""
import argparse
import faulthandler
import signal

import lightning as L
import torch

from rundir.integrations.lightning import RundirCallback


class Regressor(L.LightningModule):
    def __init__(self, lr: float = 1e-3, hidden: int = 64):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=1, help="processes; more than 1: strategy ddp on CPU (gloo)")
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)              # a tiny model: more threads only contend
    x = torch.randn(4096, 32)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sin().sum(1, keepdim=True)), batch_size=64,
                                       shuffle=True)
    model = Regressor()
    # default_root_dir: where Lightning's own SLURM requeue saves (hpc_ckpt_N.ckpt) and resumes from.
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", default_root_dir=f"{args.run_dir}/lightning",
                        logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[RundirCallback(args.run_dir, config=dict(model.hparams))])
    trainer.fit(model, data)


if __name__ == "__main__":
    main()
