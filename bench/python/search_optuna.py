#!/usr/bin/env python3
"""Optuna on bench_search's problems (the formulas of libtune/tune/tuner/problems.cpp),
same budgets and seeds: the best value found in EVALS evaluations, median over SEEDS
seeds, at each concurrency (that many trials asked before the oldest is told), for
Optuna's random sampler, its TPE with its defaults (in Optuna 5.0 they include
multivariate and constant_liar=True), with constant_liar=False, and with
multivariate=False (independent, the liar on), and its GPSampler (with torch and
scipy installed); and
the sampling cost per trial (the time in ask(), in ms). Two-objective problems: the
hypervolume of what was evaluated, for the random sampler, TPESampler (Optuna's default
for several objectives) and NSGAIISampler. One JSON object per line.
Run by bench_search --optuna PYTHON (Optuna from PyPI in a virtual environment, for
benchmarks only)."""
import argparse, json, math, os, statistics, sys, time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # Optuna's advice for GPSampler (torch), before it loads
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(x1, x2):
    a, b, c, r, s, t = 1, 5.1 / (4 * math.pi ** 2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return a * (x2 - b * x1 * x1 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
     [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]


def hartmann6(x):
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j] * 1e-4) ** 2 for j in range(6))) for i in range(4))


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1))


PROBLEMS = {
    "branin": (lambda t: branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15))),
    "hartmann6": (lambda t: hartmann6([t.suggest_float(f"x{j}", 0, 1) for j in range(6)])),
    "rosenbrock20": (lambda t: rosenbrock([t.suggest_float(f"x{j}", -2.048, 2.048) for j in range(20)])),
}


def zdt1(x):
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    return [x[0], g * (1 - math.sqrt(x[0] / g))]


def dtlz2(x):
    g = sum((v - 0.5) ** 2 for v in x[1:])
    return [(1 + g) * math.cos(x[0] * math.pi / 2), (1 + g) * math.sin(x[0] * math.pi / 2)]


# name: (objective of a trial, the reference point of the hypervolume)
TWO_OBJECTIVE = {
    "zdt1": (lambda t: zdt1([t.suggest_float(f"x{j}", 0, 1) for j in range(30)]), (1.1, 11.0)),
    "dtlz2": (lambda t: dtlz2([t.suggest_float(f"x{j}", 0, 1) for j in range(11)]), (3.0, 3.0)),
}


def hypervolume_2d(points, ref):
    """The area dominated by the points and bounded by ref (both objectives minimized)."""
    inside = sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1])
    area, best_y = 0.0, ref[1]
    for x, y in inside:
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return area


def run_two(problem, sampler_name, seed, evals, concurrency):
    s = optuna.samplers.NSGAIISampler(seed=seed) if sampler_name == "nsga2" else sampler(sampler_name, seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=s)
    f, ref = TWO_OBJECTIVE[problem]
    in_flight, found, ask_s = [], [], 0.0
    for _ in range(evals):
        t0 = time.perf_counter()
        trial = study.ask()
        value = f(trial)
        ask_s += time.perf_counter() - t0
        in_flight.append((trial, value))
        if len(in_flight) >= concurrency:
            t, v = in_flight.pop(0)
            study.tell(t, v)
            found.append(v)
    for t, v in in_flight:
        study.tell(t, v)
        found.append(v)
    return hypervolume_2d(found, ref), 1000 * ask_s / evals


def sampler(name, seed):
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "tpe_no_liar":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=False)
    if name == "tpe_independent":
        return optuna.samplers.TPESampler(seed=seed, multivariate=False)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)  # needs torch and scipy
    raise SystemExit(f"unknown sampler {name}")


def run(problem, sampler_name, seed, evals, concurrency):
    study = optuna.create_study(direction="minimize", sampler=sampler(sampler_name, seed))
    f = PROBLEMS[problem]
    in_flight, best, ask_s = [], math.inf, 0.0
    for _ in range(evals):
        t0 = time.perf_counter()
        trial = study.ask()
        value = f(trial)  # the suggestions are made here, inside ask's trial
        ask_s += time.perf_counter() - t0
        in_flight.append((trial, value))
        if len(in_flight) >= concurrency:
            t, v = in_flight.pop(0)
            study.tell(t, v)
            best = min(best, v)
    for t, v in in_flight:
        study.tell(t, v)
        best = min(best, v)
    return best, 1000 * ask_s / evals


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--evals", type=int, default=100)
    ap.add_argument("--problems", default="branin,hartmann6,rosenbrock20")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--samplers", default="random,tpe,tpe_no_liar,tpe_independent")
    ap.add_argument("--two-objective", default="zdt1,dtlz2")
    ap.add_argument("--two-objective-evals", type=int, default=200)
    a = ap.parse_args()
    for problem in filter(None, a.problems.split(",")):
        if problem not in PROBLEMS:
            raise SystemExit(f"unknown problem {problem}: one of {', '.join(PROBLEMS)}")
        for c in map(int, a.concurrency.split(",")):
            for s in a.samplers.split(","):
                runs = [run(problem, s, seed, a.evals, c) for seed in range(a.seeds)]
                print(json.dumps({"problem": problem, "concurrency": c, "sampler": s,
                                  "best": [r[0] for r in runs],
                                  "median": statistics.median(r[0] for r in runs),
                                  "ms_per_trial": statistics.median(r[1] for r in runs)}), flush=True)
    main_two(a)


def main_two(a):
    for problem in filter(None, a.two_objective.split(",")):
        if problem not in TWO_OBJECTIVE:
            raise SystemExit(f"unknown two-objective problem {problem}: one of {', '.join(TWO_OBJECTIVE)}")
        for c in map(int, a.concurrency.split(",")):
            for s in ("random", "tpe", "nsga2"):
                runs = [run_two(problem, s, seed, a.two_objective_evals, c) for seed in range(a.seeds)]
                print(json.dumps({"problem": problem, "concurrency": c, "sampler": s,
                                  "best": [r[0] for r in runs],
                                  "median": statistics.median(r[0] for r in runs),
                                  "ms_per_trial": statistics.median(r[1] for r in runs)}), flush=True)


if __name__ == "__main__":
    main()
