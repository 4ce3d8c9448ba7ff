#!/usr/bin/env bash
# Issue 23 on the GPU machine (from the repository's root, the build unpacked at its
# absolute path): auto-packing's GPU tests, then the 64-trial CNN tuning run with a
# fixed 0.25 share and with gpu "auto", each with the card's utilisation sampled every
# 200 ms by nvidia-smi.
#   bench/gpu_issue23_run.sh BUILD_DIR OUT_DIR [SAMPLES]
# Writes OUT_DIR/summary.json: per run wall_s, trials/min, test_acc, util mean and the
# share of samples at >= 90%, and auto-packing's decision.
set -uo pipefail
build=${1:?}; out=${2:?}; samples=${3:-64}
mkdir -p "$out"
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
nvidia-smi -L > "$out/host.txt" 2>&1
timeout 240 "$build/tests/gpu_packing_test" > "$out/gpu_packing_test.log" 2>&1; step gpu_packing_test $?
grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/gpu_packing_test.log"

# One tuning run: fashion_mnist with the given share, the card sampled meanwhile.
run() {
  local name=$1 share=$2
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$out/$name.util" 2>/dev/null &
  local sampler=$!
  timeout 420 "$build/examples/fashion_mnist" --model cnn --samples "$samples" --gpus-per-trial "$share" \
    --progress lines --experiment-dir "$out/$name-exp" > "$out/$name.json" 2> "$out/$name.log"
  step "$name" $?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
}
run fixed 0.25
run auto auto

python3 - "$out" "$samples" <<'EOF'
import json, sqlite3, sys, os, statistics
out, samples = sys.argv[1], int(sys.argv[2])
summary = {"samples": samples}
for name in ("fixed", "auto"):
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
    db = f"{out}/{name}-exp/experiment.db"
    if os.path.exists(db):
        con = sqlite3.connect(db)
        try:
            rows = con.execute("select kind, trial, body from events where kind like 'auto_%'").fetchall()
            r["auto_events"] = [{"kind": k, "trial": t, "body": json.loads(b)} for k, t, b in rows][:20]
        except Exception as e:
            r["auto_events_error"] = str(e)
    summary[name] = r
f, a = summary["fixed"], summary["auto"]
if f.get("trials_per_min") and a.get("trials_per_min"):
    summary["auto_vs_fixed_trials_per_min"] = round(a["trials_per_min"] / f["trials_per_min"], 3)
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1)[:6000])
EOF
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
cat "$out/after.txt"
