"""A Ray Tune script as people write it, with the import lines changed (`ray` ->
`libtune`): what tests/python_wheel_test.sh runs with the installed wheel in a fresh
virtual environment. It exits 0 when every check holds."""
import os
import sys
import tempfile

import libtune as ray
from libtune import train, tune
from libtune.tune.schedulers import ASHAScheduler
from libtune.tune.search.optuna import OptunaSearch


def train_fn(config):
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            start = int(open(os.path.join(d, "epoch")).read())
    for epoch in range(start + 1, 9):
        loss = (config["lr"] - 0.01) ** 2 * 1e4 + config["layers"] / epoch
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch"), "w") as f:
                f.write(str(epoch))
            train.report({"loss": loss, "gpus": len(ray.get_gpu_ids())},
                         checkpoint=train.Checkpoint.from_directory(d))


if __name__ == "__main__":
    storage = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    ray.init(num_cpus=4)
    tuner = tune.Tuner(
        tune.with_resources(train_fn, {"cpu": 1}),
        param_space={"lr": tune.loguniform(1e-4, 1e-1), "layers": tune.choice([1, 2, 4])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=12, max_concurrent_trials=4,
                                    scheduler=ASHAScheduler(max_t=8, grace_period=2), search_alg=OptunaSearch()),
        run_config=train.RunConfig(name="wheel_smoke", storage_path=storage, verbose=1),
    )
    results = tuner.fit()
    best = results.get_best_result()
    print("best config:", best.config, "loss:", best.metrics["loss"], "trials:", len(results),
          "errors:", results.num_errors)
    assert len(results) == 12 and results.num_errors == 0, results.errors
    assert best.checkpoint is not None
    assert min(r.metrics["loss"] for r in results if r.metrics) == best.metrics["loss"]
    assert any(r.metrics["training_iteration"] < 8 for r in results), "ASHA stopped none early"
    print("wheel_smoke: ok")
