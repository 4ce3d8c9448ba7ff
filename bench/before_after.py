#!/usr/bin/env python3
"""Runs libtune's own benchmarks from two builds side by side, alternately, and reports
each number's median per build and their ratio (after / before).

  bench/before_after.py --before OLD_BUILD --after NEW_BUILD [--rounds 5] [--out FILE.md]
                        [--only overhead,pg,results,start]

Each round runs every benchmark once from each build, the order of the two builds
alternating from round to round (a machine that slows down during the run weighs on both
alike). A benchmark's numbers are the keys of the JSON object on its last line of output.
Both builds must be of the same configuration (benchmarks on: LIBTUNE_BENCH=ON).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# What each benchmark runs with: small enough for a few rounds, large enough to measure.
BENCHES = {
    "overhead": (["--trials", "1000", "--repeats", "1"], ["wall_over_ideal", "wall_s"]),
    "pg": (["--quick"], ["inproc_pairs_per_s", "loopback_pairs_per_s", "ready_ms_p50", "ready_ms_p99"]),
    "results": (["--repeats", "1", "--results-per-trial", "50000"], ["inproc_per_s", "cross_process_per_s"]),
    "start": (["--trials", "40"], ["cpp_p50_ms", "python_p50_ms", "python_added_p50_ms"]),
}


def run(build, name, args, log):
    exe = os.path.join(build, "bench", "bench_" + name)
    if not os.access(exe, os.X_OK):
        sys.exit(f"before_after: {exe} is not there: build the benchmarks (LIBTUNE_BENCH=ON) in {build}")
    began = time.monotonic()
    p = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(f"$ {exe} {' '.join(args)}  (rc {p.returncode}, {time.monotonic() - began:.1f} s)\n{p.stdout}\n")
    log.flush()
    if p.returncode != 0:
        sys.exit(f"before_after: {exe} failed (exit {p.returncode}); its output is in the log")
    for line in reversed(p.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"before_after: {exe} printed no JSON line; its output is in the log")


def numbers(result, keys):
    if keys is None:
        keys = [k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: float(result[k]) for k in keys if k in result}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the build folder of the old code")
    ap.add_argument("--after", required=True, help="the build folder of the new code")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(BENCHES), help="benchmarks to run, comma-separated")
    ap.add_argument("--out", help="write the table (markdown) here too")
    ap.add_argument("--log", default="before_after.log", help="every benchmark's whole output")
    a = ap.parse_args()
    chosen = [n for n in a.only.split(",") if n]
    for n in chosen:
        if n not in BENCHES:
            sys.exit(f"before_after: no benchmark '{n}' (one of {', '.join(BENCHES)})")
    if a.rounds < 1:
        sys.exit("before_after: --rounds must be at least 1")
    got = {(n, side): [] for n in chosen for side in ("before", "after")}
    with open(a.log, "w") as log:
        for r in range(a.rounds):
            for n in chosen:
                args, keys = BENCHES[n]
                order = ("before", "after") if r % 2 == 0 else ("after", "before")
                for side in order:
                    build = a.before if side == "before" else a.after
                    got[(n, side)].append(numbers(run(build, n, args, log), keys))
                print(f"round {r + 1}/{a.rounds}: {n} done", file=sys.stderr, flush=True)
    lines = ["| benchmark | number | before (median) | after (median) | after / before |", "|---|---|---|---|---|"]
    for n in chosen:
        keys = sorted(set().union(*[set(x) for x in got[(n, "before")]]))
        for k in keys:
            b = statistics.median(x[k] for x in got[(n, "before")] if k in x)
            f = statistics.median(x[k] for x in got[(n, "after")] if k in x)
            ratio = f"{f / b:.3f}" if b else "-"
            lines.append(f"| bench_{n} | {k} | {b:.4g} | {f:.4g} | {ratio} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
