#!/usr/bin/env python3
"""hooks_rate.py: results per second through the Python driver's hooks (issue 52).

Each repeat runs the same experiment twice, side by side in one process (which goes
first alternates): TRIALS function trials that report RESULTS results each as fast as
they can, once with no user code (the engine alone: tune run decides everything) and
once with a no-op ``Callback.on_trial_result`` and a no-op ``Stopper`` that the driver
calls on every result. The rate is the results stored over the span between the first
and the last stored result (the store's ingestion times, as bench_results counts), and
for the hooked run also the results the callback saw over its own first-to-last span.
Every result must be stored, and with hooks every one must reach the callback.

    PYTHONPATH=python LIBTUNE_TUNE=build/nodes/tune python3 bench/python/hooks_rate.py \
        [--trials 2] [--results 100000] [--repeats 3] [--out FILE]

Last line of stdout: one JSON object with the medians and every run.
"""
import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

import libtune
from libtune import tune


def flood(config):
    n = config["results"]
    for i in range(1, n + 1):
        tune.report({"score": config["x"] + i * 1e-9})


class NoOpCallback(tune.Callback):
    def __init__(self):
        self.seen = 0
        self.first = None
        self.last = None

    def on_trial_result(self, iteration, trials, trial, result):
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.seen += 1


class NoOpStopper(tune.Stopper):
    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return False


def _cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def stored_rate(exp_dir, expected):
    db = sqlite3.connect(os.path.join(exp_dir, "experiment.db"))
    try:
        n, first, last = db.execute("SELECT count(*), min(time), max(time) FROM results").fetchone()
    finally:
        db.close()
    if n != expected:
        sys.exit(f"hooks_rate: {n} results stored of {expected} in {exp_dir}")
    return n / max(last - first, 1e-9)


def one_run(storage, name, trials, results, hooked):
    cb, stop = NoOpCallback(), NoOpStopper()
    run = tune.RunConfig(storage_path=storage, name=name, verbose=0,
                         callbacks=[cb] if hooked else None, stop=stop if hooked else None)
    tuner = tune.Tuner(tune.with_resources(flood, {"cpu": 1}),
                       param_space={"x": tune.uniform(0, 1), "results": results},
                       tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=trials,
                                                   max_concurrent_trials=trials),
                       run_config=run)
    t0, cpu0 = time.time(), _cpu()
    grid = tuner.fit()
    wall, cpu = time.time() - t0, _cpu() - cpu0
    if grid.num_errors:
        sys.exit(f"hooks_rate: {grid.num_errors} trials failed in {storage}/{name}")
    expected = trials * results
    out = {"hooked": hooked, "stored_per_s": stored_rate(os.path.join(storage, name), expected), "wall_s": wall,
           "driver_cpu_s": cpu, "driver_cpu_us_per_result": cpu / expected * 1e6}
    if hooked:
        if cb.seen != expected:
            sys.exit(f"hooks_rate: the callback saw {cb.seen} results of {expected}")
        out["callback_per_s"] = cb.seen / max(cb.last - cb.first, 1e-9)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--results", type=int, default=100000, help="results per trial")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="append the JSON line to this file too")
    a = p.parse_args()
    libtune.init(num_cpus=a.trials, log_to_driver=False)
    storage = tempfile.mkdtemp(prefix="libtune-hooks-rate-")
    runs = []
    try:
        for k in range(a.repeats):
            for side in range(2):
                hooked = (side + k) % 2 == 1
                r = one_run(storage, f"run{k}-{'hooks' if hooked else 'plain'}", a.trials, a.results, hooked)
                runs.append(r)
                extra = (f", callback {r['callback_per_s']:.0f}/s" if hooked else "") + f", driver {r['driver_cpu_us_per_result']:.1f} us/result"
                print(f"repeat {k + 1} {'hooks' if hooked else 'plain'}: stored {r['stored_per_s']:.0f}/s{extra}, "
                      f"fit {r['wall_s']:.2f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
        libtune.shutdown()
    plain = [r["stored_per_s"] for r in runs if not r["hooked"]]
    hooks = [r["stored_per_s"] for r in runs if r["hooked"]]
    seen = [r["callback_per_s"] for r in runs if r["hooked"]]
    line = {"bench": "hooks_rate", "trials": a.trials, "results_per_trial": a.results, "repeats": a.repeats,
            "plain_stored_per_s": statistics.median(plain), "hooks_stored_per_s": statistics.median(hooks),
            "hooks_callback_per_s": statistics.median(seen),
            "hooks_over_plain": statistics.median(hooks) / statistics.median(plain), "runs": runs}
    text = json.dumps(line)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
