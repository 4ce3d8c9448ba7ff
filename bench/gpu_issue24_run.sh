#!/usr/bin/env bash
# Issue 24 on a machine with 4 GPUs (nvidia-h200-x4), from the repository's root with
# the build unpacked at its absolute path:
#   bench/gpu_issue24_run.sh BUILD_DIR OUT_DIR [PARTS="1 2 3 4 5"]
# 1. 32 trials on 4 cards at 0.125 GPU each: fashion_mnist --model cnn and the PyTorch
#    example (examples/pytorch), each with nvidia-smi sampled meanwhile and checked by
#    bench/audit_check.py (every trial's PID, node, cards, peak memory; trials on a card
#    not theirs, over quota; per-card utilisation). OUT_DIR/run1.json: the issue's record.
# 2. Several cards per trial: fashion_mnist's built-in data-parallel workload with
#    {gpu: 2} (one trial alone, then two side by side on the two pairs) and {gpu: 4};
#    the PyTorch example with nn.DataParallel on {gpu: 2}.
# 3. Two nodes on this machine (--gpus 0,1 and --gpus 2,3): one SIGKILLed mid-experiment,
#    its trials continue on the other from their checkpoints; started again, then
#    `tune rebalance`; the cards afterwards.
# 4. The containment checks on every card: the escape check (bench/gpu_containment_check.sh
#    with CARD=k), gpu_isolation_test.
# 5. bench_trials --cards 4, without and with --mps.
# DRY=1: the same on a machine without GPUs (logical GPUs, the MLP on the CPU, fewer
# trials; parts 4 and 5 need cards and are skipped): a check of this script itself.
# Everything it wrote: OUT_DIR/all.tgz as well (the device tool brings back few files).
set -uo pipefail
build=$(readlink -f "${1:?usage: gpu_issue24_run.sh BUILD_DIR OUT_DIR [PARTS]}"); out=${2:?}; parts=${3:-1 2 3 4 5}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"; out=$(readlink -f "$out")
dry=${DRY:-}
tune=$build/nodes/tune
fm=$build/examples/fashion_mnist
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
pack() { (cd "$out" && tar -czf all.tgz --exclude=all.tgz --exclude='*-exp' . 2>/dev/null); }
sampler=""
sample_on() { [ -n "$dry" ] && return; bash "$here/smi_sample.sh" "$1" 0.2 & sampler=$!; }
sample_off() { [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null; sampler=""; }
export TUNE_RUNTIME_DIR=/tmp/tune-issue24-rt TUNE_TOKEN_FILE=/tmp/tune-issue24-rt/token
cleanup() { sample_off; "$tune" stop --grace 5 > /dev/null 2>&1; pack; }
trap cleanup EXIT
if [ -n "$dry" ]; then
  cards=4; model=mlp; samples=8; gpu_flags=(--num-gpus 4)
else
  cards=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  model=cnn; samples=32; gpu_flags=()
  nvidia-smi -L > "$out/host.txt" 2>&1
  [ "$cards" -ge 4 ] || echo "warning: $cards GPU(s) here; the issue's runs need 4"
fi
epochs=${EPOCHS:-15}

# A PyTorch experiment file from examples/pytorch's, with these keys replaced (its
# working_dir made absolute: the file goes to OUT_DIR).
pytorch_file() {  # dest num_samples gpu epochs [scheduler]
  sed -e "s/^num_samples:.*/num_samples: $2/" -e "s/^resources_per_trial:.*/resources_per_trial: {gpu: $3, cpu: 1}/" \
      -e "s/^  epochs:.*/  epochs: $4/" -e "s|^working_dir:.*|working_dir: $PWD/examples/pytorch|" \
      examples/pytorch/experiment.yaml > "$1"
  [ -n "${5:-}" ] && sed -i "s/^scheduler:.*/scheduler: $5/" "$1"
  echo "reuse_workers: true" >> "$1"
}
have_torch=true
python3 -c "import torch" 2> /dev/null || { have_torch=false; echo "no torch here: the PyTorch runs are skipped"; }

# ---- 1. 32 trials on 4 cards
if [[ " $parts " == *" 1 "* ]]; then
  sample_on "$out/run1-fm.smi"
  start=$(date +%s.%N)
  timeout 420 "$fm" --model "$model" --samples "$samples" --epochs "$epochs" --gpus-per-trial 0.125 "${gpu_flags[@]}" \
    --progress lines --experiment-dir "$out/run1-fm-exp" > "$out/run1-fm.json" 2> "$out/run1-fm.log"
  step "1: fashion_mnist, $samples trials at 0.125" $?
  wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  sample_off
  python3 "$here/audit_check.py" "$out/run1-fm-exp" "$out/run1-fm.smi" --json-to "$out/run1-fm-audit.json" \
    > "$out/run1-fm-audit.txt"
  step "1: audit (fashion_mnist)" $?
  head -3 "$out/run1-fm-audit.txt"
  if $have_torch; then
    pytorch_file "$out/run1-pt.yaml" "$samples" 0.125 8
    sample_on "$out/run1-pt.smi"
    timeout 600 "$tune" run "$out/run1-pt.yaml" "${gpu_flags[@]}" --experiment-dir "$out/run1-pt-exp" \
      --progress lines > "$out/run1-pt.json" 2> "$out/run1-pt.log"
    step "1: the PyTorch example, $samples trials at 0.125" $?
    sample_off
    python3 "$here/audit_check.py" "$out/run1-pt-exp" "$out/run1-pt.smi" --json-to "$out/run1-pt-audit.json" \
      > "$out/run1-pt-audit.txt"
    step "1: audit (PyTorch)" $?
    head -3 "$out/run1-pt-audit.txt"
  fi
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  python3 - "$out" "$cards" "$wall" "$(date +%F)" "$dry" "$name" <<'EOF'
import json, sys
out, cards, wall, date, dry, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
fm = json.load(open(f"{out}/run1-fm.json")) if open(f"{out}/run1-fm.json").read().strip() else {}
a = json.load(open(f"{out}/run1-fm-audit.json"))
try:
    pa = json.load(open(f"{out}/run1-pt-audit.json"))
except OSError:
    pa = {"audit_violations": 0, "over_quota_samples": 0, "trials": 0, "trials_not_ok": None}
rec = {"date": date, "device": "logical GPUs (DRY run)" if dry else f"{cards}x {name}", "cards": cards,
       "trials": a["trials"], "test_acc": fm.get("test_acc"), "wall_s": wall,
       "audit_violations": a["audit_violations"] + pa["audit_violations"],
       "over_quota_samples": a["over_quota_samples"] + pa["over_quota_samples"],
       "per_card_util_mean": a["per_card_util_mean"], "pytorch_trials": pa["trials"],
       "pytorch_not_ok": pa["trials_not_ok"], "target": "test_acc >= 0.925 within 300 s on 4 cards"}
json.dump(rec, open(f"{out}/run1.json", "w"), indent=1)
print(json.dumps(rec))
EOF
fi

# ---- 2. several cards per trial
if [[ " $parts " == *" 2 "* ]]; then
  for spec in "2 1" "2 2" "4 1"; do
    set -- $spec; k=$1; n=$2
    sample_on "$out/run2-gpu$k-x$n.smi"
    timeout 300 "$fm" --model "$model" --samples "$n" --epochs 4 --gpus-per-trial "$k" --scheduler fifo "${gpu_flags[@]}" \
      --progress lines --experiment-dir "$out/run2-gpu$k-x$n-exp" > "$out/run2-gpu$k-x$n.json" 2> "$out/run2-gpu$k-x$n.log"
    step "2: fashion_mnist, $n trial(s) of {gpu: $k}" $?
    sample_off
    python3 "$here/audit_check.py" "$out/run2-gpu$k-x$n-exp" "$out/run2-gpu$k-x$n.smi" | head -8
    # each epoch's time, as the trial reported it (a neighbour on the other cards must not change it)
    sqlite3 "$out/run2-gpu$k-x$n-exp/experiment.db" \
      "select trial, iteration, json_extract(metrics, '$.epoch_s'), json_extract(metrics, '$.devices') from results" \
      > "$out/run2-gpu$k-x$n.epochs.txt" 2>&1
    cat "$out/run2-gpu$k-x$n.epochs.txt"
  done
  if $have_torch; then
    pytorch_file "$out/run2-pt.yaml" 2 2 3
    sample_on "$out/run2-pt.smi"
    timeout 300 "$tune" run "$out/run2-pt.yaml" "${gpu_flags[@]}" --experiment-dir "$out/run2-pt-exp" \
      --progress lines > "$out/run2-pt.json" 2> "$out/run2-pt.log"
    step "2: the PyTorch example, nn.DataParallel on {gpu: 2}" $?
    sample_off
    python3 "$here/audit_check.py" "$out/run2-pt-exp" "$out/run2-pt.smi" | head -8
  fi
fi

# ---- 3. two nodes on one machine, one killed and started again, then rebalanced
if [[ " $parts " == *" 3 "* ]]; then
  rm -rf "$TUNE_RUNTIME_DIR"; mkdir -m 711 "$TUNE_RUNTIME_DIR"
  h=$("$tune" start --head --host 127.0.0.1 --port 0 --no-dashboard)
  addr=$(echo "$h" | sed -n 's/.*head started at \([^ ]*\).*/\1/p')
  if [ -n "$dry" ]; then a_flags=(--num-gpus 2); b_flags=(--num-gpus 2); else a_flags=(--gpus 0,1); b_flags=(--gpus 2,3); fi
  "$tune" start --address "$addr" "${a_flags[@]}" > "$out/run3-node-a.txt" 2>&1
  "$tune" start --address "$addr" "${b_flags[@]}" > "$out/run3-node-b.txt" 2>&1
  pid_b=$(grep -o '(pid [0-9]*)' "$out/run3-node-b.txt" | tr -dc 0-9)
  node_b=$(grep -o 'node-[0-9a-f]*' "$out/run3-node-b.txt" | head -1)
  echo "cluster at $addr; node B $node_b (pid $pid_b)"
  if $have_torch && [ -z "$dry" ]; then  # the PyTorch example: it checkpoints every epoch
    pytorch_file "$out/run3.yaml" 4 0.5 30 "{type: fifo}"
    printf 'strategy: spread\nmax_failures: 3\n' >> "$out/run3.yaml"  # both nodes run some; a lost node's go on
  else  # without torch: a trial that checkpoints every epoch and sleeps through it
    cat > "$out/run3.yaml" <<EOF2
name: issue24-failover
command: [python3, ckpt_counter.py]
working_dir: $here/python
metric: val_acc
mode: max
num_samples: 4
space: {epochs: 60, epoch_s: 0.5}
resources_per_trial: {gpu: 0.5, cpu: 0.5}
strategy: spread
max_failures: 3
scheduler: {type: fifo}
EOF2
  fi
  sample_on "$out/run3.smi"
  timeout 400 "$tune" run "$out/run3.yaml" --address "$addr" --experiment-dir "$out/run3-exp" --progress lines \
    > "$out/run3.json" 2> "$out/run3.log" &
  run=$!
  sleep "${KILL_AFTER:-12}"
  "$tune" status --address "$addr" > "$out/run3-status-before.txt" 2>&1
  kill -9 "$pid_b"; echo "SIGKILL node B at $(date +%T)"
  sleep 8
  "$tune" status --address "$addr" > "$out/run3-status-b-dead.txt" 2>&1
  "$tune" start --address "$addr" "${b_flags[@]}" > "$out/run3-node-b2.txt" 2>&1; echo "node B started again: $(tail -1 "$out/run3-node-b2.txt")"
  sleep 3
  "$tune" rebalance --address "$addr" > "$out/run3-rebalance.txt" 2>&1; step "3: tune rebalance" $?
  cat "$out/run3-rebalance.txt"
  sleep 10
  "$tune" status --address "$addr" > "$out/run3-status-after.txt" 2>&1
  wait $run; step "3: the experiment across the kill" $?
  sample_off
  [ -z "$dry" ] && nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv > "$out/run3-cards-after.txt" 2>&1
  python3 - "$out/run3-exp" <<'EOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/experiment.db")
kinds = dict(db.execute("select kind, count(*) from events group by kind"))
ends = [json.loads(b) for (b,) in db.execute("select body from events where kind = 'ended'")]
restored = [json.loads(b).get("restored_from") for (b,) in db.execute("select body from events where kind = 'started'")]
states = dict(db.execute("select state, count(*) from trials group by state"))
print(json.dumps({"events": kinds, "trial_states": states, "starts_from_a_checkpoint": sum(1 for r in restored if r),
                  "ended_not_ok": sum(1 for e in ends if not e.get("ok"))}))
EOF
  python3 "$here/audit_check.py" "$out/run3-exp" "$out/run3.smi" | head -12
  [ -z "$dry" ] && { echo "cards after the run:"; cat "$out/run3-cards-after.txt"; }
  "$tune" stop > /dev/null 2>&1
fi

# ---- 4. containment on every card
if [[ " $parts " == *" 4 "* ]] && [ -z "$dry" ]; then
  for k in $(seq 0 $((cards - 1))); do
    CARD=$k bash "$here/gpu_containment_check.sh" "$tune" "$out/run4-card$k" python3 > "$out/run4-card$k.log" 2>&1
    step "4: escape check on card $k" $?
    grep -E '^\{|FAILED' "$out/run4-card$k.log"
  done
  timeout 300 "$build/tests/gpu_isolation_test" > "$out/run4-gpu_isolation_test.log" 2>&1; step "4: gpu_isolation_test" $?
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/run4-gpu_isolation_test.log"
fi

# ---- 5. bench_trials on 4 cards
if [[ " $parts " == *" 5 "* ]] && [ -z "$dry" ]; then
  for m in "" --mps; do
    timeout 300 "$build/bench/bench_trials" --cards "$cards" --repeats 3 $m > "$out/run5-trials$m.log" 2>&1
    step "5: bench_trials --cards $cards $m" $?
    grep -E '^(mlp|cnn):|^\{' "$out/run5-trials$m.log" | cut -c1-400
  done
fi
