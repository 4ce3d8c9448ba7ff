#!/usr/bin/env bash
# The escape of issue 18 on a real card (run on the GPU machine, as root): a trial whose
# helper leaves its process group (setsid, double fork) holding 2.5 GiB of GPU memory.
# For each containment (cgroup, subreaper): after the trial ends the helper must be gone,
# nvidia-smi must list none of its processes, and the trial's recorded peak GPU memory
# must include the helper's. Prints one JSON line per mode; exits 1 on a failed check.
#   bench/gpu_containment_check.sh TUNE_BINARY OUT_DIR [PYTHON]
# CARD=k: on card k (a head and a node started with --gpus k), not the first card.
set -u
tune=$(readlink -f "$1"); out=$(readlink -f "$2"); python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
fail=0
for mode in cgroup subreaper; do
  work=$(mktemp -d /tmp/gpu-escape-XXXXXX)
  chmod 711 "$work"  # a root node runs trials as nobody, in folders below it
  cp "$here/python/gpu_escape.py" "$work/"
  cat > "$work/escape.yaml" <<EOF2
command: [$python, gpu_escape.py]
working_dir: .
metric: val_acc
mode: max
progress: lines
space: {pids: $work/pids, gib: 2.5, hold_s: 2.0}
resources_per_trial: {cpu: 1, gpu: 0.25}
experiment_dir: $work/exp
EOF2
  : > "$work/pids" && chmod 666 "$work/pids"  # the trial (nobody, as root) writes its helper's pid
  if [ -n "${CARD:-}" ]; then  # on that card: a head and a node holding only it
    export TUNE_RUNTIME_DIR=$work/rt TUNE_TOKEN_FILE=$work/rt/token
    mkdir -m 711 "$work/rt"
    addr=$("$tune" start --head --host 127.0.0.1 --port 0 --no-dashboard | sed -n 's/.*head started at \([^ ]*\).*/\1/p')
    "$tune" start --address "$addr" --gpus "$CARD" --containment "$mode" > "$out/node-$mode.txt" 2>&1
    (cd "$work" && "$tune" run escape.yaml --address "$addr") > "$out/run-$mode.log" 2>&1
    rc=$?
    "$tune" stop > /dev/null 2>&1
  else
    (cd "$work" && "$tune" run escape.yaml --num-gpus 1 --containment "$mode") > "$out/run-$mode.log" 2>&1
    rc=$?
  fi
  sleep 0.5
  helper=$(cat "$work/pids" 2>/dev/null | head -1)
  alive=false
  # Alive: running, not a zombie that the machine's init has not reaped yet (a killed
  # process that was reparented to init stays one until init waits for it).
  if [ -n "$helper" ] && [ -r "/proc/$helper/stat" ]; then
    state=$(sed 's/.*) //' "/proc/$helper/stat" | cut -d' ' -f1)
    [ "$state" != Z ] && alive=true
    echo "helper $helper after the trial: state $state" >> "$out/run-$mode.log"
  fi
  apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1)
  on_card=false
  if [ -n "$helper" ] && echo "$apps" | grep -q "^$helper,"; then on_card=true; fi
  peak=$(python3 - "$work/exp/experiment.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
row = db.execute("select info from trials").fetchone()
info = json.loads(row[0])
print(json.dumps({k: info.get(k) for k in ("gpu_memory_peak", "containment", "left_behind_count", "host_memory_peak", "cpu_seconds")}))
PY
)
  events=$(python3 - "$work/exp/experiment.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print([(k, b[:300]) for k, b in db.execute("select kind, body from events where kind in ('left_behind')")])
PY
)
  echo "{\"mode\": \"$mode\", \"run_rc\": $rc, \"helper\": \"$helper\", \"helper_alive_after\": $alive, \"helper_on_card_after\": $on_card, \"trial\": $peak}" | tee "$out/result-$mode.json"
  echo "nvidia-smi compute apps after the trial: [$apps]" >> "$out/run-$mode.log"
  echo "events: $events" >> "$out/run-$mode.log"
  gpeak=$(echo "$peak" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gpu_memory_peak"] or 0)')
  if [ $rc != 0 ] || [ -z "$helper" ] || $alive || $on_card || [ "$gpeak" -lt $((2 * 1024 * 1024 * 1024)) ]; then
    echo "FAILED ($mode)"; fail=1
  fi
  [ -n "$helper" ] && kill -9 "$helper" 2>/dev/null
  rm -rf "$work"
done
exit $fail
