"""A Lightning module that andrea-console operates, through the callback.

    python examples/lightning_module.py runs/lightning [--steps N]      # then: andrea-console runs/lightning
"""
import argparse

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
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)              # a tiny model: more threads only contend
    x = torch.randn(4096, 32)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sin().sum(1, keepdim=True)), batch_size=64,
                                       shuffle=True)
    model = Regressor()
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[RundirCallback(args.run_dir, config=dict(model.hparams))])
    trainer.fit(model, data)


if __name__ == "__main__":
    main()
