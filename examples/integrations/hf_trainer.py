#!/usr/bin/env python3
"""A Hugging Face Trainer script (an MLP on Fashion-MNIST; no download) that becomes a
libtune trial by adding one callback, libtune.integrations.huggingface.TuneReportCallback:

    tune run examples/integrations/hf_trainer.yaml

It reports each epoch's evaluation (eval_loss, eval_accuracy) with the checkpoint the
Trainer saves; a trial started from a checkpoint resumes the Trainer from it."""
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments

import libtune
from libtune import tune
from libtune.integrations.huggingface import TuneReportCallback

from fashion_data import split


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, pixels, labels=None):
        logits = self.net(pixels)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


class Examples(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"pixels": self.x[i], "labels": self.y[i]}


def accuracy(prediction):
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def main():
    config = {"hidden": 128, "lr": 0.05, "batch_size": 128, "epochs": 4, "limit": 0}
    config.update(libtune.config())
    train, val = split(config, limit=config["limit"] or None)
    output = os.path.join(libtune.trial_dir() or tempfile.mkdtemp(), "hf")
    args = TrainingArguments(output_dir=output, num_train_epochs=config["epochs"], learning_rate=config["lr"],
                             per_device_train_batch_size=config["batch_size"], per_device_eval_batch_size=1024,
                             eval_strategy="epoch", save_strategy="epoch", save_total_limit=1, logging_strategy="epoch",
                             report_to=[], disable_tqdm=True, use_cpu=not torch.cuda.is_available())
    trainer = Trainer(MLP(config["hidden"]), args, train_dataset=Examples(*train), eval_dataset=Examples(*val),
                      compute_metrics=accuracy, callbacks=[TuneReportCallback()])
    checkpoint = tune.get_checkpoint() if libtune.in_trial() else None
    trainer.train(resume_from_checkpoint=checkpoint.path if checkpoint else None)


if __name__ == "__main__":
    main()
