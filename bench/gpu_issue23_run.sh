#!/usr/bin/env bash
# Issue 23 on the GPU machine (from the repository's root, the build unpacked at its
# absolute path): auto-packing's GPU tests, then the 64-trial CNN tuning run with a
# fixed 0.25 share and with gpu "auto", each with the card's utilisation sampled every
# 200 ms by nvidia-smi: on an embedded cluster (no MPS), and with --mps on a cluster of
# a head and a node started with `tune start --mps` (the way a shared card is run).
#   bench/gpu_issue23_run.sh BUILD_DIR OUT_DIR [SAMPLES] [MODES]
# MODES: "plain mps" (default). FASHION_ARGS: more fashion_mnist options for every run
# (e.g. "--reuse-workers 0"). Writes OUT_DIR/summary.json: per run wall_s,
# trials/min, test_acc, the card's utilisation (mean, share of samples >= 90%), the
# run's timeline (bench/timeline.py) and auto-packing's decisions; `tune status`
# during the auto runs in OUT_DIR/<run>.status.txt.
set -uo pipefail
build=${1:?}; out=${2:?}; samples=${3:-64}; modes=${4:-plain mps}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
nvidia-smi -L > "$out/host.txt" 2>&1
if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: the runs only (repeats)
  timeout 240 "$build/tests/gpu_packing_test" > "$out/gpu_packing_test.log" 2>&1; step gpu_packing_test $?
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/gpu_packing_test.log"
fi

export TUNE_RUNTIME_DIR=/tmp/tune-issue23-rt
addr=""
cluster_up() {  # a head and a node with MPS, on loopback
  rm -rf "$TUNE_RUNTIME_DIR"; mkdir -m 711 "$TUNE_RUNTIME_DIR"
  local h; h=$("$build/nodes/tune" start --head --host 127.0.0.1 --port 0 --no-dashboard --token-file "$TUNE_RUNTIME_DIR/token")
  addr=$(echo "$h" | sed -n 's/.*head started at \([^ ]*\).*/\1/p')
  "$build/nodes/tune" start --address "$addr" --token-file "$TUNE_RUNTIME_DIR/token" --mps > "$out/node-mps.txt" 2>&1
  echo "cluster at $addr: $(tail -1 "$out/node-mps.txt")"
}
cluster_down() { "$build/nodes/tune" stop > /dev/null 2>&1; addr=""; }

# One tuning run: fashion_mnist with the given share, the card sampled meanwhile.
run() {
  local name=$1 share=$2; shift 2
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$out/$name.util" 2>/dev/null &
  local sampler=$!
  timeout 420 "$build/examples/fashion_mnist" --model cnn --samples "$samples" --gpus-per-trial "$share" \
    --progress lines --experiment-dir "$out/$name-exp" ${FASHION_ARGS:-} "$@" > "$out/$name.json" 2> "$out/$name.log" &
  local prog=$!
  if [ -n "$addr" ] && [ "$share" = auto ]; then  # what tune status says mid-run
    sleep 15
    "$build/nodes/tune" status --address "$addr" --token-file "$TUNE_RUNTIME_DIR/token" > "$out/$name.status.txt" 2>&1
  fi
  wait $prog; step "$name" $?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  python3 "$here/timeline.py" "$out/$name-exp" --json > "$out/$name.timeline.json" 2>&1
}
for mode in $modes; do
  if [ "$mode" = mps ]; then
    cluster_up
    run fixed-mps 0.25 --address "$addr" --token-file "$TUNE_RUNTIME_DIR/token"
    run auto-mps auto --address "$addr" --token-file "$TUNE_RUNTIME_DIR/token"
    cluster_down
  else
    run fixed 0.25
    run auto auto
  fi
done

python3 - "$out" "$samples" "$modes" <<'EOF'
import json, sqlite3, sys, os, statistics
out, samples, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
summary = {"samples": samples}
names = [n for m in modes for n in ((f"fixed-{m}", f"auto-{m}") if m != "plain" else ("fixed", "auto"))]
for name in names:
    r = {}
    try:
        r = json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        r = {"error": f"no result: {e}"}
    util = []
    for line in open(f"{out}/{name}.util"):
        try: util.append(float(line.strip()))
        except ValueError: pass
    # The run's own span: from the first sample above 0 to the last (start-up and the
    # end's clean-up, when the card holds nothing, are outside the tuning).
    busy = [i for i, u in enumerate(util) if u > 0]
    span = util[busy[0]:busy[-1] + 1] if busy else []
    r["util_samples"] = len(span)
    r["gpu_util_mean"] = round(statistics.mean(span), 1) if span else None
    r["gpu_util_ge90"] = round(sum(u >= 90 for u in span) / len(span), 3) if span else None
    if r.get("wall_s"):
        r["trials_per_min"] = round(r.get("trials", 0) / r["wall_s"] * 60, 2)
    try:
        r["timeline"] = json.load(open(f"{out}/{name}.timeline.json"))
    except Exception as e:
        r["timeline"] = f"none: {e}"
    db = f"{out}/{name}-exp/experiment.db"
    if os.path.exists(db):
        con = sqlite3.connect(db)
        rows = con.execute("select kind, trial, body from events where kind like 'auto_%'").fetchall()
        r["auto_events"] = [{"kind": k, "trial": t, "body": json.loads(b)} for k, t, b in rows][:20]
        ends = [json.loads(b) for (b,) in con.execute("select body from events where kind = 'ended'")]
        r["ended"] = len(ends)
        r["worker_reused"] = sum(1 for e in ends if e.get("worker_reused"))
        r["worker_kept"] = sum(1 for e in ends if e.get("worker_kept"))
        r["ended_not_ok"] = sum(1 for e in ends if not e.get("ok"))
        r["over_quota"] = sum(1 for e in ends if e.get("over_quota"))
    summary[name] = r
for m in modes:
    f, a = (("fixed", "auto") if m == "plain" else (f"fixed-{m}", f"auto-{m}"))
    if summary[f].get("trials_per_min") and summary[a].get("trials_per_min"):
        summary[f"auto_vs_fixed_trials_per_min_{m}"] = round(summary[a]["trials_per_min"] / summary[f]["trials_per_min"], 3)
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
for name in names:
    r = summary[name]
    print(name, {k: r.get(k) for k in ("wall_s", "trials_per_min", "test_acc", "best_val_acc", "errors", "gpu_util_mean", "gpu_util_ge90",
                                       "worker_reused", "ended_not_ok", "over_quota")})
    print("   timeline", r.get("timeline"))
    for e in r.get("auto_events", []):
        if e["kind"] != "auto_probe": print("  ", e["kind"], e["trial"], json.dumps(e["body"]))
print({k: v for k, v in summary.items() if k.startswith("auto_vs")})
EOF
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
cat "$out/after.txt"
