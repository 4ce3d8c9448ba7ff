#!/usr/bin/env python3
"""Where a tuning run's time goes between trials: read from its experiment folder.

    bench/timeline.py EXPERIMENT_DIR [--json]

For each trial, from the store (experiment.db): created (the engine's start) ->
started (its node's "started" event: group placed, process spawned) -> first result
(the trainable's own figures say how much of that was its start: process_s at its
first epoch minus epoch_s) -> last result -> ended. For the run: how many trials
ran at each moment against the most that ran at once, and the slot-seconds left idle
while trials were waiting to start (the gaps this issue removes).
"""
import json
import sqlite3
import statistics
import sys


def median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    db = sqlite3.connect(f"{sys.argv[1]}/experiment.db")
    trials = {t: {"created": c} for t, c in db.execute("select id, created from trials")}
    for trial, time, kind in db.execute("select trial, time, kind from events where trial != '' order by seq"):
        t = trials.setdefault(trial, {})
        if kind == "started" and "started" not in t:
            t["started"] = time
        if kind == "ended":
            t["ended"] = time
    for trial, it, time, metrics in db.execute("select trial, iteration, time, metrics from results order by trial, iteration"):
        t = trials[trial]
        m = json.loads(metrics)
        if "first" not in t:
            t["first"] = time
            if "process_s" in m and "epoch_s" in m:
                t["worker_start_s"] = m["process_s"] - m["epoch_s"]
                t["data_load_s"] = m.get("data_load_s")
            t["epoch_s"] = m.get("epoch_s")
        t["last"] = time
    rows = [t for t in trials.values() if "started" in t and "ended" in t]
    if not rows:
        print("no trial started and ended in", sys.argv[1])
        return 1
    out = {
        "trials": len(rows),
        "created_to_started_s": median([t["started"] - t["created"] for t in rows]),
        "started_to_first_result_s": median([t["first"] - t["started"] for t in rows if "first" in t]),
        "worker_start_s": median([t.get("worker_start_s") for t in rows]),
        "data_load_s": median([t.get("data_load_s") for t in rows]),
        "first_epoch_s": median([t.get("epoch_s") for t in rows]),
        "last_result_to_ended_s": median([t["ended"] - t["last"] for t in rows if "last" in t]),
    }
    # Running trials over time (started..ended) against the most that ran at once;
    # idle slot-seconds: slots free while a trial waited between its creation and start.
    t0 = min(t["created"] for t in rows)
    t1 = max(t["ended"] for t in rows)
    edges = sorted([(t["started"], 1) for t in rows] + [(t["ended"], -1) for t in rows])
    running, peak, area, last = 0, 0, 0.0, t0
    for time, d in edges:
        area += running * (time - last)
        last = time
        running += d
        peak = max(peak, running)
    waiting = sum(t["started"] - t["created"] for t in rows)
    out.update({"wall_s": round(t1 - t0, 3), "most_at_once": peak,
                "mean_running": round(area / (t1 - t0), 2) if t1 > t0 else None,
                "slot_use": round(area / (peak * (t1 - t0)), 3) if peak and t1 > t0 else None,
                "waiting_trial_s": round(waiting, 2)})
    if "--json" in sys.argv:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
