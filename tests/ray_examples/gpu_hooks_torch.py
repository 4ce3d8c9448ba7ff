#!/usr/bin/env python3
"""The user's code in the engine's decisions, with PyTorch trials on real GPUs: a Ray
Tune script (libtune's import lines) whose trials' GPU shares come from a function of
their configuration (with_resources(fn, lambda config: ...)), with a Callback that
records what each trial saw, a Stopper class, sample_from, and each trial's print()
on the driver's terminal (log_to_driver). Run by gpu_mnist_pytorch.sh's machine set-up
or alone on a machine with a GPU and PyTorch:

    python3 gpu_hooks_torch.py [--samples 8]

Exit status 0 when every check holds (printed as one JSON line at the end)."""
import argparse
import json
import time

import libtune as ray
from libtune import tune

import torch


def train(config):
    device = torch.device("cuda:0")
    torch.manual_seed(config["seed"])
    x = torch.randn(4096, 64, device=device)
    w_true = torch.randn(64, 1, device=device)
    y = x @ w_true
    model = torch.nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    print(f"devices={torch.cuda.device_count()} name={torch.cuda.get_device_name(0)} share={config['share']}",
          flush=True)
    for step in range(1, 50):
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[: config["batch"]]), y[: config["batch"]])
            loss.backward()
            opt.step()
        time.sleep(0.1)
        tune.report({"loss": loss.item(), "devices": torch.cuda.device_count(),
                     "mib": torch.cuda.max_memory_allocated() / 2 ** 20, "t": time.time()})


class Seen(tune.Callback):
    def __init__(self):
        self.results = 0
        self.devices = {}
        self.spans = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results += 1
        self.devices[trial.trial_id] = result["devices"]
        first, _ = self.spans.get(trial.trial_id, (result["t"], 0))
        self.spans[trial.trial_id] = (first, result["t"])


class AtFive(tune.Stopper):
    def __call__(self, trial_id, result):
        return result["training_iteration"] >= 5

    def stop_all(self):
        return False


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=8)
    args = p.parse_args()
    ray.init()
    seen = Seen()
    tuner = tune.Tuner(
        tune.with_resources(train, lambda config: {"cpu": 1, "gpu": config["share"]}),
        param_space={"lr": tune.loguniform(1e-3, 1e-1), "share": tune.grid_search([0.25, 0.5]),
                     "batch": tune.sample_from(lambda spec: 2 ** (8 + spec.config.seed % 4)),
                     "seed": tune.randint(0, 1000)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=args.samples // 2),
        run_config=tune.RunConfig(name="gpu_hooks", stop=AtFive(), callbacks=[seen]),
    )
    grid = tuner.fit()
    spans = sorted(seen.spans.values())
    peak = max(sum(1 for a, b in spans if a <= t <= b) for t, _ in spans)
    checks = {
        "trials": len(grid), "errors": grid.num_errors,
        "each_saw_one_device": all(d == 1 for d in seen.devices.values()) and len(seen.devices) == len(grid),
        "stopped_at_five": all(r.metrics["training_iteration"] == 5 for r in grid),
        "batches_from_sample_from": sorted({r.config["batch"] for r in grid}),
        "shares": sorted({r.config["share"] for r in grid}),
        "callback_results": seen.results, "peak_concurrent": peak,
    }
    ok = (checks["errors"] == 0 and checks["each_saw_one_device"] and checks["stopped_at_five"]
          and checks["callback_results"] >= 5 * len(grid) and peak >= 2)
    print(json.dumps({"ok": ok, **checks}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
