"""optuna_loop.py: the baseline of the OptunaSearch comparison (run.sh --search optuna):
Optuna alone, no tuning system, on bench_tune.py's workload: 200 trials x 10 reports x
50 ms of sleep, 16 at once (study.optimize(n_jobs=16): 16 threads in one process), the
same TPESampler(seed=0) over x ~ uniform(0, 1), each report a trial.report. Its wall
time over the ideal (6.5 s) is what Optuna's own ask/tell and threads cost; a tuning
system's overhead beyond it is the system's.

    python optuna_loop.py [--repeat N]

One JSON line per run: {"system": "optuna-loop", "wall_s", "ideal_s", "overhead_s",
"per_trial_ms" (overhead_s / 200 x 1000), "trials"}.
"""
import argparse
import json
import math
import time

import optuna

TRIALS, REPORTS, SLEEP_S, AT_ONCE = 200, 10, 0.05, 16


def objective(trial):
    x = trial.suggest_float("x", 0, 1)
    loss = None
    for i in range(REPORTS):
        time.sleep(SLEEP_S)
        loss = x * (i + 1)
        trial.report(loss, i + 1)
    return loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ideal = math.ceil(TRIALS / AT_ONCE) * REPORTS * SLEEP_S
    for _ in range(a.repeat):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0), direction="minimize")
        t0 = time.time()
        study.optimize(objective, n_trials=TRIALS, n_jobs=AT_ONCE)
        wall = time.time() - t0
        print(json.dumps({"system": "optuna-loop", "optuna": optuna.__version__, "wall_s": round(wall, 3),
                          "ideal_s": ideal, "overhead_s": round(wall - ideal, 3),
                          "per_trial_ms": round((wall - ideal) / TRIALS * 1000, 2), "trials": len(study.trials)}),
              flush=True)


if __name__ == "__main__":
    main()
