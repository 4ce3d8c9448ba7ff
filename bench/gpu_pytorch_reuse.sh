#!/usr/bin/env bash
# On the GPU machine: examples/pytorch tuned with `tune run` (16 trials, 0.25 GPU each,
# ASHA) without and with `reuse_workers: true`, alternately: wall time, trials whose
# process was reused, a trial's start (the controller's) to its first result, the best
# trial's accuracy.
#   bench/gpu_pytorch_reuse.sh BUILD_DIR OUT_DIR [REPEATS=1]     (from the repository's root)
set -uo pipefail
build=${1:?}; out=${2:?}; repeats=${3:-1}
mkdir -p "$out"
reuse_file=examples/pytorch/experiment-reuse.yaml
{ cat examples/pytorch/experiment.yaml; echo "reuse_workers: true"; } > "$reuse_file"
summary() {  # exp tag wall
  python3 - "$1" "$2" "$3" <<'PY'
import json, sqlite3, statistics, sys
exp, tag, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
db = sqlite3.connect(exp + "/experiment.db")
created = dict(db.execute("SELECT id, created FROM trials"))
first = dict(db.execute("SELECT trial, min(time) FROM results GROUP BY trial"))
ended = [json.loads(b) for (b,) in db.execute("SELECT body FROM events WHERE kind = 'ended'")]
best = max((json.loads(m).get("val_acc", 0) for (m,) in db.execute("SELECT metrics FROM results")), default=0)
waits = sorted(first[t] - created[t] for t in first if t in created)
print(json.dumps({"run": tag, "wall_s": round(wall, 1), "trials": len(created),
                  "trials_per_min": round(60 * len(created) / wall, 1),
                  "reused": sum(e.get("worker_reused", False) for e in ended),
                  "not_ok": sum(not e.get("ok", False) for e in ended),
                  "start_to_first_result_median_s": round(statistics.median(waits), 2) if waits else None,
                  "best_val_acc": best}))
PY
}
for r in $(seq 1 "$repeats"); do
  for mode in fresh reuse; do
    exp=/tmp/tune-pytorch-$mode-$r; rm -rf "$exp"
    file=examples/pytorch/experiment.yaml; [ $mode = reuse ] && file=$reuse_file
    start=$(date +%s.%N)
    timeout 200 "$build/nodes/tune" run "$file" --experiment-dir "$exp" --progress lines \
      > "$out/$mode-$r.json" 2> "$out/$mode-$r.log"
    rc=$?
    end=$(date +%s.%N)
    echo "== $mode $r: exit $rc"
    summary "$exp" "$mode-$r" "$(python3 -c "print($end - $start)")" | tee -a "$out/summary.jsonl"
  done
done
rm -f "$reuse_file"
