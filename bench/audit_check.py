#!/usr/bin/env python3
"""An audit of a tuning run independent of libtune's own: every trial's record from the
experiment store against what nvidia-smi saw on the cards meanwhile.

    bench/audit_check.py EXPERIMENT_DIR [SMI_SAMPLES] [--json | --json-to FILE]

SMI_SAMPLES: the output of bench/smi_sample.sh (lines "T <unix time>" then
"<pid>, <gpu uuid>, <used MiB>" for each process on a card at that time). For each
trial: its worker's PID, node, the cards it was given (UUID, index inside the trial,
share, memory quota) and the peak GPU memory the node recorded. Then, from the
samples: a trial's process seen on a card it was not given (a violation), or above its
quota (over quota), and processes on the cards that no trial owns (listed, not counted:
MPS daemons, other people's work). Exits 1 when there is a violation or an over-quota
sample or a trial that did not end well. --json prints the record as JSON instead of
the summary; --json-to FILE writes it there and prints the summary too.
"""
import json
import sqlite3
import sys


def load_trials(exp):
    db = sqlite3.connect(f"{exp}/experiment.db")
    trials = {}
    for trial, kind, body in db.execute("SELECT trial, kind, body FROM events WHERE kind IN ('started', 'ended') ORDER BY seq"):
        b = json.loads(body)
        t = trials.setdefault(trial, {"starts": [], "ended": None})
        if kind == "started":
            t["starts"].append({"pid": b.get("pid"), "node": b.get("node"),
                                "cards": [{"uuid": g.get("uuid"), "index": g.get("index"), "local": g.get("local"),
                                           "share": g.get("share"), "memory_quota": g.get("memory_quota")}
                                          for g in b.get("gpus", [])]})
        else:
            t["ended"] = {"ok": b.get("ok"), "gpu_memory_peak": b.get("gpu_memory_peak"),
                          "gpu_audited": b.get("gpu_audited"), "error": b.get("error", "")[:200],
                          "worker_reused": b.get("worker_reused", False)}
    return trials


def load_samples(path):
    samples, now = [], None
    try:
        f = open(path)
    except OSError as e:
        print(f"audit_check.py: no samples ({path}: {e.strerror}): the store's records only", file=sys.stderr)
        return samples
    with f:
        for line in f:
            line = line.strip()
            if line.startswith("T "):
                now = float(line[2:])
            elif line and now is not None and "," in line:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) >= 3 and parts[0].isdigit():
                    used = int(parts[2]) if parts[2].isdigit() else 0
                    samples.append((now, int(parts[0]), parts[1], used * 1024 * 1024))
    return samples


def per_card_util(path):
    """Each card's mean utilisation over the span in which any card was busy."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = [x.strip() for x in line.split(",")]
                if len(p) >= 4 and p[3].isdigit():
                    rows.append((float(p[0]), p[2], int(p[3])))
    except OSError:
        return {}
    busy = [t for t, _, u in rows if u > 0]
    if not busy:
        return {}
    first, last = min(busy), max(busy)
    per = {}
    for t, uuid, u in rows:
        if first <= t <= last:
            per.setdefault(uuid, []).append(u)
    return {uuid: round(sum(v) / len(v), 1) for uuid, v in per.items()}


def main():
    argv = sys.argv[1:]
    json_to = None
    if "--json-to" in argv:
        at = argv.index("--json-to")
        if at + 1 >= len(argv):
            print("audit_check.py: --json-to needs a file", file=sys.stderr)
            return 2
        json_to = argv[at + 1]
        del argv[at:at + 2]
    args = [a for a in argv if not a.startswith("--")]
    if not args or "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__.strip())
        return 0 if args else 2
    exp = args[0]
    try:
        trials = load_trials(exp)
    except sqlite3.Error as e:
        print(f"audit_check.py: cannot read {exp}/experiment.db: {e}", file=sys.stderr)
        return 2
    # A worker's PID can run several trials (reused workers), always on the same cards.
    owner = {}
    for tid, t in trials.items():
        for s in t["starts"]:
            if s["pid"]:
                owner.setdefault(s["pid"], {"trials": set(), "cards": {}})
                owner[s["pid"]]["trials"].add(tid)
                for c in s["cards"]:
                    owner[s["pid"]]["cards"][c["uuid"]] = c.get("memory_quota") or 0
    violations, over_quota, foreign = [], [], {}
    samples = load_samples(args[1]) if len(args) > 1 else []
    for when, pid, uuid, used in samples:
        o = owner.get(pid)
        if o is None:
            foreign.setdefault(pid, set()).add(uuid)
        elif uuid not in o["cards"]:
            violations.append({"time": when, "pid": pid, "card": uuid, "trials": sorted(o["trials"])})
        elif o["cards"][uuid] and used > o["cards"][uuid]:
            over_quota.append({"time": when, "pid": pid, "card": uuid, "used": used, "quota": o["cards"][uuid]})
    records = []
    for tid, t in sorted(trials.items()):
        last = t["starts"][-1] if t["starts"] else {}
        e = t["ended"] or {}
        records.append({"trial": tid, "pid": last.get("pid"), "node": last.get("node"),
                        "cards": [c["uuid"] for c in last.get("cards", [])],
                        "local_indices": [c["local"] for c in last.get("cards", [])],
                        "gpu_memory_peak": e.get("gpu_memory_peak"), "ok": e.get("ok"), "starts": len(t["starts"])})
    not_ok = [r["trial"] for r in records if r["ok"] is not True]
    util = per_card_util(args[1] + ".util") if len(args) > 1 else {}
    out = {"trials": len(records), "samples": len(samples), "audit_violations": len(violations),
           "over_quota_samples": len(over_quota), "trials_not_ok": len(not_ok),
           "per_card_util_mean": util, "foreign_processes": {str(p): sorted(c) for p, c in foreign.items()},
           "violations": violations[:20], "over_quota": over_quota[:20], "records": records}
    if json_to:
        with open(json_to, "w") as f:
            json.dump(out, f, indent=1)
    if "--json" in argv:
        print(json.dumps(out, indent=1))
    else:
        print(f"{out['trials']} trials, {out['samples']} process sightings: {out['audit_violations']} on a card not "
              f"theirs, {out['over_quota_samples']} over quota, {len(not_ok)} not ok; "
              f"{len(foreign)} processes of no trial on the cards")
        for uuid, u in util.items():
            print(f"  card {uuid}: utilisation {u}% (mean over the run)")
        for r in records:
            print(f"  {r['trial']}: pid {r['pid']} on {r['node']}, cards {r['cards']} (inside: {r['local_indices']}), "
                  f"peak {r['gpu_memory_peak']} B, ok {r['ok']}, starts {r['starts']}")
    return 1 if violations or over_quota or not_ok else 0


if __name__ == "__main__":
    sys.exit(main())
