#!/usr/bin/env python3
"""Where a trial's start and end go, step by step, across a cluster's processes.

    TUNE_TRACE_STEPS=/tmp/steps.log bench_overhead --repeats 1   (or any run on one machine)
    bench/steps.py /tmp/steps.log [--json]

Every process of a cluster started with TUNE_TRACE_STEPS set appends one line per
traced step ("<step> <trial> <monotonic ns>", tune/core/trace.hpp): the controller
(create_sent, create_answered, start_sent, start_answered, end_heard), the node
(start_received), the trial's actor (worker_running, end_sent) and its watching thread
(prepare, prepared, spawned: a new process; hand_over, handed_over: a reused worker;
exited, went_idle, cgroup_ended). This prints each segment's median, mean and p90 in
ms, and the chain that matters for throughput: from a trial's end_sent on its node to
the worker_running of the trial the controller started on hearing that end.
A trial id seen again after its end (another run in the same file) starts a new record.
"""
import json
import statistics
import sys

SEGMENTS = [
    ("end_sent", "end_heard", "its end, node -> controller"),
    ("create_sent", "create_answered", "its group: create -> placed, answered"),
    ("create_answered", "start_sent", "controller, group placed -> start sent"),
    ("start_sent", "start_received", "start, controller -> head -> node"),
    ("start_received", "prepare", "node: trial actor and watching thread up"),
    ("prepare", "prepared", "its folder and cgroup made"),
    ("prepared", "spawned", "its process forked (warm spawner)"),
    ("hand_over", "handed_over", "an idle worker takes it (reused)"),
    ("spawned", "worker_running", "spawned -> the start answered on the node"),
    ("handed_over", "worker_running", "handed over -> the start answered on the node"),
    ("worker_running", "start_answered", "start answer, node -> head -> controller"),
    ("exited", "cgroup_ended", "its cgroup emptied and removed"),
    ("went_idle", "end_sent", "its worker kept idle -> end sent"),
    ("cgroup_ended", "end_sent", "cgroup ended -> end sent"),
]


def stats(values):
    if not values:
        return None
    v = sorted(values)
    return {"n": len(v), "median_ms": round(statistics.median(v) / 1e6, 3),
            "mean_ms": round(statistics.mean(v) / 1e6, 3), "p90_ms": round(v[int(0.9 * (len(v) - 1))] / 1e6, 3)}


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    events = []
    try:
        with open(sys.argv[1]) as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != 3 or not parts[2].isdigit():
                    print(f"steps.py: line {n} is not '<step> <trial> <ns>': {line.strip()[:80]}", file=sys.stderr)
                    continue
                events.append((int(parts[2]), parts[0], parts[1]))
    except OSError as e:
        print(f"steps.py: cannot read {sys.argv[1]}: {e.strerror}", file=sys.stderr)
        return 1
    events.sort()
    records, current = [], {}   # current: trial id -> its record (step -> ns)
    chain = []                  # end_sent of one trial -> worker_running of the next one
    heard = None                # the record whose end the controller heard last
    for ns, step, trial in events:
        r = current.get(trial)
        if r is None or (step in ("create_sent", "start_sent") and "end_heard" in r):
            r = current[trial] = {}
            records.append(r)
        r.setdefault(step, ns)
        if step == "end_heard":
            heard = r
        elif step == "create_sent" and heard is not None:
            r["_after"] = heard
            heard = None
    out = {"trials": len(records), "segments": {}}
    for a, b, what in SEGMENTS:
        s = stats([r[b] - r[a] for r in records if a in r and b in r and r[b] >= r[a]])
        if s:
            out["segments"][f"{a} -> {b}"] = dict(s, what=what)
    for r in records:
        prev = r.get("_after")
        if prev and "end_sent" in prev and "worker_running" in r:
            chain.append(r["worker_running"] - prev["end_sent"])
    out["end_to_next_running"] = stats(chain)
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['trials']} trial starts")
    print(f"{'segment':44} {'n':>6} {'median':>8} {'mean':>8} {'p90':>8}  (ms)")
    for k, s in out["segments"].items():
        print(f"{k:44} {s['n']:6} {s['median_ms']:8.2f} {s['mean_ms']:8.2f} {s['p90_ms']:8.2f}  {s['what']}")
    c = out["end_to_next_running"]
    if c:
        print(f"{'a trial end_sent -> the next worker_running':44} {c['n']:6} {c['median_ms']:8.2f} "
              f"{c['mean_ms']:8.2f} {c['p90_ms']:8.2f}  the slot's gap on the critical path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
