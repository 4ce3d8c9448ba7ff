#!/usr/bin/env python3
"""ray_overhead.py: bench_overhead's workload in Ray Tune, for a side-by-side comparison.

N trials (--trials 2000) of R reports each (--reports 10), each report after S ms of
sleep (--sleep-ms 50), 64 trials at once (--slots 64); the ideal wall time is
N x R x S / 64 (15.6 s). Only `tuner.fit()` is timed: Ray's start (ray.init and the
worker pool it prestarts, which this script waits out) is left out, as bench_overhead
leaves out its cluster's start. Every trial must finish with R results, else exit 1.
Last line of stdout, one JSON object:
  {"system": "ray-tune", "ray_version": ..., "trials": N, "reports": R, "sleep_ms": S,
   "slots": 64, "wall_s": ..., "ideal_s": ..., "wall_over_ideal": ..., ...}

How the 64 slots are expressed (--slots-as, default gpu): bench_overhead's trials each
ask for one logical GPU on 4 nodes x (16 GPUs, 16 CPUs). Here one Ray node gets
num_gpus=64 and num_cpus=64 (the same totals) and each trial asks {"gpu": 1}, which Tune
turns into a placement group bundle {"CPU": 0, "GPU": 1}: the GPUs alone bound the
concurrency at 64, exactly as in libtune, and Ray sets CUDA_VISIBLE_DEVICES per trial as
libtune does. --slots-as cpu: num_cpus=64, no GPUs, Tune's default {"cpu": 1} per trial.
Everything else is Ray's and Tune's default, except: verbose=0 (no progress table, as
bench_overhead runs with progress none), usage stats off (RAY_USAGE_STATS_ENABLED=0:
there is no network to send them to), the node's address pinned to 127.0.0.1 and all of
Ray's files (session, logs, Tune's results, the auth token Ray keeps in ~/.ray: HOME is
the scratch folder) in a scratch folder removed at the end.
reuse_actors is Tune's default (False) unless --reuse-actors true; the JSON says which.

Usage: ray_overhead.py [--trials N] [--reports R] [--sleep-ms S] [--slots 64]
                       [--slots-as gpu|cpu] [--reuse-actors false|true] [--tmp-root /tmp]
"""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def sleeper(config):
    """The trial: R times, sleep S ms, then report (bench_overhead's C++ sleeper). The
    process id and the time go with the score: how many worker processes served the
    trials, and how many trials ran at once."""
    from ray import tune

    pid = os.getpid()
    for i in range(1, config["reports"] + 1):
        time.sleep(config["sleep_ms"] / 1000.0)
        tune.report({"score": float(i), "pid": pid, "t": time.time()})


def _parent(pid):
    """The parent of a process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0
    return int(text[text.rfind(")") + 2:].split()[1])


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ray_processes():
    """Every process descended from this one (Ray's gcs_server, raylet and workers)."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent[int(name)] = _parent(int(name))
    me, out = os.getpid(), []
    for pid in parent:
        p, seen = pid, 0
        while p and p != me and seen < 64:
            p, seen = parent.get(p, 0), seen + 1
        if p == me and pid != me:
            out.append(pid)
    return out


def machine_busy_s():
    """CPU seconds the whole machine has spent busy (/proc/stat: all but idle and iowait).
    Ray's raylet does not collect its workers' CPU times when they exit, so the machine's
    total over fit() (the machine otherwise quiet) is what Ray and its trials cost."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(limit_s=180.0):
    """Wait until Ray's start is over: the number of ray:: workers steady for 3 s and
    the machine's CPUs mostly idle (at least 80%) over that time. Returns seconds waited."""
    def busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v) - v[3] - v[4], sum(v)

    t0 = time.monotonic()
    last, steady_since = -1, time.monotonic()
    b0, a0 = busy()
    while time.monotonic() - t0 < limit_s:
        time.sleep(0.5)
        n = sum(1 for p in ray_processes() if _cmdline(p).startswith("ray::"))
        if n != last:
            last, steady_since = n, time.monotonic()
            b0, a0 = busy()
            continue
        if time.monotonic() - steady_since >= 3.0:
            b1, a1 = busy()
            if a1 > a0 and (b1 - b0) / (a1 - a0) <= 0.2:
                break
            steady_since, (b0, a0) = time.monotonic(), (b1, a1)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description="bench_overhead's workload in Ray Tune")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--reports", type=int, default=10)
    ap.add_argument("--sleep-ms", type=int, default=50)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--slots-as", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--reuse-actors", choices=["false", "true"], default="false")
    ap.add_argument("--tmp-root", default="/tmp", help="where the scratch folder goes (short: Ray's socket paths)")
    a = ap.parse_args()
    if a.trials < 1 or a.reports < 1 or a.sleep_ms < 0 or a.slots < 1:
        ap.error("every count must be at least 1")

    # A SIGTERM or SIGHUP (the side-by-side script's trap, a timeout) ends like Ctrl-C:
    # through the finally below, which stops Ray and removes the scratch folder.
    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    scratch = tempfile.mkdtemp(prefix="rayov-", dir=a.tmp_root)
    # Ray 2.60 keeps its token (token authentication, on by default) in ~/.ray/auth_token:
    # HOME is the scratch folder, so that nothing of the run outlives it.
    os.environ["HOME"] = scratch
    import ray
    from ray import tune

    rc, out = 1, None
    try:
        init = dict(num_cpus=a.slots, _temp_dir=os.path.join(scratch, "r"), _node_ip_address="127.0.0.1")
        if a.slots_as == "gpu":
            init["num_gpus"] = a.slots
        t0 = time.monotonic()
        ray.init(**init)
        init_s = time.monotonic() - t0
        quiet_s = wait_for_quiet()
        resources = {"gpu": 1} if a.slots_as == "gpu" else {"cpu": 1}
        reuse = a.reuse_actors == "true"
        tuner = tune.Tuner(
            tune.with_resources(sleeper, resources),
            param_space={"reports": a.reports, "sleep_ms": a.sleep_ms},
            tune_config=tune.TuneConfig(num_samples=a.trials, metric="score", mode="max", reuse_actors=reuse),
            run_config=tune.RunConfig(name="ray_overhead", storage_path=os.path.join(scratch, "results"), verbose=0),
        )
        cpu0 = machine_busy_s()
        t1 = time.monotonic()
        grid = tuner.fit()
        wall = time.monotonic() - t1
        cpu = machine_busy_s() - cpu0  # the machine's, all of it: Ray's processes and the trials'
        n_ray = len(ray_processes())

        bad = []
        if len(grid) != a.trials:
            bad.append(f"{len(grid)} trials instead of {a.trials}")
        if grid.num_errors:
            bad.append(f"{grid.num_errors} trials failed")
        results, pids, edges = 0, set(), []
        for r in grid:
            if r.metrics and "pid" in r.metrics:
                pids.add(r.metrics["pid"])
            df = r.metrics_dataframe
            n = len(df) if df is not None else 0
            if n and "t" in df:  # the trial ran from its first sleep to its last report
                edges += [(float(df["t"].min()) - a.sleep_ms / 1000.0, 1), (float(df["t"].max()), -1)]
            results += n
            if r.error is None and (n != a.reports or (r.metrics or {}).get("training_iteration") != a.reports):
                bad.append(f"trial {r.metrics.get('trial_id') if r.metrics else '?'} has {n} results")
        peak = now = 0
        for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
            now += step
            peak = max(peak, now)
        ideal = a.trials * a.reports * a.sleep_ms / 1000.0 / a.slots
        out = {
            "system": "ray-tune",
            "ray_version": ray.__version__,
            "trials": a.trials,
            "reports": a.reports,
            "sleep_ms": a.sleep_ms,
            "slots": a.slots,
            "slots_as": a.slots_as,
            "reuse_actors": reuse,
            "wall_s": round(wall, 3),
            "ideal_s": ideal,
            "wall_over_ideal": round(wall / ideal, 4) if ideal > 0 else None,
            "results": results,
            "trial_processes": len(pids),
            "peak_concurrent_trials": peak,
            "machine_cpu_s": round(cpu, 1),
            "cpu_ms_per_trial": round(cpu * 1000.0 / a.trials, 1),
            "ray_processes_after": n_ray,
            "ray_init_s": round(init_s, 2),
            "warm_pool_wait_s": round(quiet_s, 1),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
        print(f"ray-tune: {a.trials} trials in {wall:.2f} s, ideal {ideal:.2f} s: {wall / ideal:.3f} "
              f"(reuse_actors={reuse}, {out['cpu_ms_per_trial']} ms CPU per trial, at most {peak} trials "
              f"at once, {len(pids)} worker processes)", file=sys.stderr)
        if bad:
            print("ray_overhead: " + "; ".join(bad[:10]), file=sys.stderr)
        else:
            rc = 0
    except KeyboardInterrupt as e:
        print(f"ray_overhead: stopped ({e})", file=sys.stderr)
        rc = 130
    finally:
        try:
            ray.shutdown()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if out is not None:  # last, after Ray's own last words
        sys.stderr.flush()
        print(json.dumps(out), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
