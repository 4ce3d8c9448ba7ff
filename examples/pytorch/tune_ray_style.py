#!/usr/bin/env python3
"""Fashion-MNIST with PyTorch, tuned by a Ray Tune script whose import lines name libtune
instead of ray (docs/ray-tune.md). The trainable is a function of its config; its
model and data loader come from train.py beside it (pickled with the trainable).

    pip install libtune-*.whl torch          # docs/install.md
    python3 examples/pytorch/tune_ray_style.py --samples 8 --gpu 0.25

Each trial checks what it sees: CUDA shows exactly one device (its card, cuda:0), and
reports that with its accuracy; the driver prints each trial's card and the GPU memory
the node's audit measured. The data: $TUNE_FASHION_MNIST_DIR, else
/usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
"""
import argparse
import json
import os
import tempfile

import libtune as ray
from libtune import train, tune
from libtune.tune.schedulers import ASHAScheduler

import torch

from train import CNN, accuracy, load, one_epoch  # noqa: E402 (beside this script)

DATA = os.environ.get("TUNE_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def train_fashion(config):
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")  # the trial's own card, whatever its number on the machine
    torch.manual_seed(config["seed"])
    (x, y), (xv, yv), _ = load(DATA, device)
    model = CNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"), map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"]
    batch = config["batch_size"]
    for epoch in range(start + 1, config["epochs"] + 1):
        loss, _ = one_epoch(model, opt, x, y, batch)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, os.path.join(d, "model.pt"))
            train.report({"val_acc": accuracy(model, xv, yv), "loss": loss.item(),
                          "cuda_devices": torch.cuda.device_count() if cuda else 0,
                          "cuda_current": torch.cuda.current_device() if cuda else -1,
                          "gpu_ids": len(ray.get_gpu_ids()),
                          "torch_peak_mib": torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else 0},
                         checkpoint=train.Checkpoint.from_directory(d))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--gpu", type=float, default=0.25, help="the share of a card each trial holds")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--storage", default=None, help="RunConfig(storage_path=...)")
    args = parser.parse_args()
    ray.init()
    tuner = tune.Tuner(
        tune.with_resources(train_fashion, {"cpu": 1, "gpu": args.gpu}),
        param_space={"lr": tune.loguniform(0.01, 0.2), "momentum": tune.uniform(0.8, 0.95),
                     "batch_size": tune.choice([64, 128, 256]), "epochs": args.epochs, "seed": tune.randint(0, 1000)},
        tune_config=tune.TuneConfig(metric="val_acc", mode="max", num_samples=args.samples,
                                    scheduler=ASHAScheduler(max_t=args.epochs, grace_period=1, reduction_factor=2)),
        run_config=train.RunConfig(name="fashion_ray_style", storage_path=args.storage),
    )
    results = tuner.fit()
    with open(os.path.join(results.experiment_path, "trials.json")) as f:
        info = {t["id"]: t["info"] for t in json.load(f)}
    for r in results:
        i = info.get(r.trial_id, {})
        cards = [g.get("uuid", g) if isinstance(g, dict) else g for g in i.get("gpus", [])]
        print(json.dumps({"trial": r.trial_id, "val_acc": r.metrics.get("val_acc"), "epochs": r.metrics.get(
            "training_iteration"), "cuda_devices": r.metrics.get("cuda_devices"), "cuda_current": r.metrics.get(
            "cuda_current"), "cards": cards, "gpu_memory_peak_mib": round(i.get("gpu_memory_peak", 0) / 2 ** 20),
            "torch_peak_mib": round(r.metrics.get("torch_peak_mib", 0)), "error": str(r.error) if r.error else None}))
    best = results.get_best_result()
    print(json.dumps({"best_config": best.config, "best_val_acc": best.metrics["val_acc"], "trials": len(results),
                      "errors": results.num_errors, "experiment": results.experiment_path}))


if __name__ == "__main__":
    main()
