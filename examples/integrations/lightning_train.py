#!/usr/bin/env python3
"""A PyTorch Lightning script (an MLP on Fashion-MNIST) that becomes a libtune trial by
adding one callback, libtune.integrations.lightning.TuneReportCheckpointCallback:

    tune run examples/integrations/lightning.yaml

It reports val_loss and val_acc and a checkpoint at the end of each validation; a trial
started from a checkpoint (ASHA's pause, a restart) goes on from it. Outside a trial it
trains with the defaults below."""
import os

import lightning.pytorch as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import libtune
from libtune import tune
from libtune.integrations.lightning import TuneReportCheckpointCallback

from fashion_data import split


class MLP(pl.LightningModule):
    def __init__(self, hidden, lr, momentum):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)


def main():
    config = {"hidden": 128, "lr": 0.05, "momentum": 0.9, "batch_size": 128, "epochs": 4, "limit": 0}
    config.update(libtune.config())
    train, val = split(config, limit=config["limit"] or None)
    loaders = (DataLoader(TensorDataset(*train), batch_size=config["batch_size"], shuffle=True),
               DataLoader(TensorDataset(*val), batch_size=1024))
    model = MLP(config["hidden"], config["lr"], config["momentum"])
    trainer = pl.Trainer(max_epochs=config["epochs"], accelerator="auto", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[TuneReportCheckpointCallback({"val_loss": "val_loss", "val_acc": "val_acc"},
                                                                 on="validation_end")])
    checkpoint = tune.get_checkpoint() if libtune.in_trial() else None
    ckpt_path = os.path.join(checkpoint.path, "checkpoint") if checkpoint else None
    trainer.fit(model, *loaders, ckpt_path=ckpt_path)


if __name__ == "__main__":
    main()
