"""bench_tune.py: one function-trainable Tune script, run as is by Ray Tune and, with
its two import lines replaced, by libtune (bench/ray_compare/run.sh does both).

200 trials x 10 reports x 50 ms of sleep, 16 trials at once (1 CPU each of 16):
the ideal is ceil(200 / 16) x 10 x 50 ms = 6.5 s. Usage:

    python bench_tune.py STORAGE_DIR        (or BENCH_STORAGE=DIR python bench_tune.py)

BENCH_SEARCH=optuna: the search is OptunaSearch with Optuna's own TPESampler (seed 0),
which both systems run in their driver (Optuna must be installed beside each).

Last line of stdout: one JSON object, {"system", "version", "import_s", "init_s",
"wall_s" (tuner.fit() alone), "ideal_s", "overhead_s" (wall_s - ideal_s),
"first_report_s" (from just before fit() to the earliest report of any trial),
"trials", "errors", "reports", "peak_concurrent", "busy_frac" (the machine's CPUs,
/proc/stat, over fit())}.

Nothing below the import lines may differ between the two systems: run.sh makes the
libtune variant by replacing exactly the two lines marked BENCH-IMPORT.
"""
import json
import math
import os
import sys
import time

_t_import = time.time()
import ray  # BENCH-IMPORT
from ray import tune  # BENCH-IMPORT
import_s = time.time() - _t_import

TRIALS, REPORTS, SLEEP_S, AT_ONCE = 200, 10, 0.05, 16


def train(config):
    for i in range(REPORTS):
        time.sleep(SLEEP_S)
        tune.report({"loss": config["x"] * (i + 1), "t": time.time()})


def _busy():
    """(busy, total) clock ticks of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def main():
    storage = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BENCH_STORAGE")
    if not storage:
        sys.exit("usage: bench_tune.py STORAGE_DIR (or BENCH_STORAGE=DIR)")
    t = time.time()
    ray.init(num_cpus=16)
    init_s = time.time() - t

    search = os.environ.get("BENCH_SEARCH", "")
    search_alg = None
    if search == "optuna":  # Optuna's own TPESampler, run by each system's OptunaSearch in its driver
        import importlib
        import optuna
        OptunaSearch = importlib.import_module(tune.__name__ + ".search.optuna").OptunaSearch
        search_alg = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=0))
    elif search:
        sys.exit(f"BENCH_SEARCH={search!r}: give optuna, or leave it unset (random search)")
    tuner = tune.Tuner(
        tune.with_resources(train, {"cpu": 1}),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=TRIALS, max_concurrent_trials=AT_ONCE,
                                    search_alg=search_alg),
        run_config=tune.RunConfig(storage_path=os.path.abspath(storage), name="bench_tune", verbose=0),
    )
    b0 = _busy()
    t0 = time.time()
    results = tuner.fit()
    wall_s = time.time() - t0
    b1 = _busy()

    firsts, edges, reports = [], [], 0
    for result in results:
        df = result.metrics_dataframe
        if df is None or "t" not in df:
            continue
        ts = [float(v) for v in df["t"]]
        if not ts:
            continue
        reports += len(ts)
        firsts.append(min(ts) - t0)
        edges += [(min(ts) - SLEEP_S, 1), (max(ts), -1)]  # the trial ran from its first sleep to its last report
    peak = now = 0
    for _, step in sorted(edges):
        now += step
        peak = max(peak, now)
    ideal_s = math.ceil(TRIALS / AT_ONCE) * REPORTS * SLEEP_S
    out = {
        "system": ray.__name__,
        "search": search or "random",
        "version": getattr(ray, "__version__", None),
        "import_s": round(import_s, 3),
        "init_s": round(init_s, 3),
        "wall_s": round(wall_s, 3),
        "ideal_s": ideal_s,
        "overhead_s": round(wall_s - ideal_s, 3),
        "first_report_s": round(min(firsts), 3) if firsts else None,
        "trials": len(results),
        "errors": results.num_errors,
        "reports": reports,
        "peak_concurrent": peak,
        "busy_frac": round((b1[0] - b0[0]) / max(1, b1[1] - b0[1]), 3),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    sys.stdout.flush()
    sys.stderr.flush()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
