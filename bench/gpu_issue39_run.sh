#!/usr/bin/env bash
# Issue 39 on the GPU machine (one H200), from the repository's root with the build
# unpacked at its absolute path:
#   bench/gpu_issue39_run.sh BUILD_DIR OUT_DIR [PARTS="1 2 3 4"]
# 1. The tests that touch it, on a real card: gpu_isolation_test (someone else's process
#    in tune status), gpu_sharing_test (simulated cards), the pure ones.
# 2. Two `tune run --local --gpus-per-trial 1` at once (two people, an embedded cluster
#    each), PyTorch trials holding 2 GiB for 3 s, nvidia-smi sampled every 0.1 s apart
#    from libtune: never two processes on the card (bench/one_owner_check.py).
# 3. A python3 process holding HOLD_GIB (default 100) GiB by hand: a trial asking
#    gpu 0.5 (then 1) waits, saying why, and starts when it ends (bench/foreign_wait.py
#    --real: the time from its end to the trial's start).
# 4. A script nobody here wrote (MNIST=path of pytorch/examples' mnist/main.py, unchanged,
#    with datasets.MNIST('../data')): tuned in a copy it fails and the error names
#    --in-place; with --in-place its 4 trials at 0.25 GPU run. Skipped without MNIST.
# Everything it wrote: OUT_DIR/all.tgz as well.
set -uo pipefail
build=$(readlink -f "${1:?usage: gpu_issue39_run.sh BUILD_DIR OUT_DIR [PARTS]}"); out=${2:?}; parts=${3:-1 2 3 4}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"; out=$(readlink -f "$out")
tune=$build/nodes/tune
step() { echo "== $1: exit $2 ($(date +%T))"; }
pack() { (cd "$out" && tar -czf all.tgz --exclude=all.tgz --exclude='*-exp' . 2>/dev/null); }
sampler=""
sample_on() { bash "$here/smi_sample.sh" "$1" 0.1 & sampler=$!; }
sample_off() { [ -n "$sampler" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null; sampler=""; }
export TUNE_SHARED_DIR=/tmp/tune-issue39-shared TUNE_RUNTIME_DIR=/tmp/tune-issue39-rt
cleanup() { sample_off; pack; }
trap cleanup EXIT
nvidia-smi -L > "$out/host.txt" 2>&1; date -u >> "$out/host.txt"
py=$(command -v python3)

# ---- 1. tests
if [[ " $parts " == *" 1 "* ]]; then
  for t in libtune/node_resources_test libtune/placement_test libtune/others_test libtune/card_claims_test; do
    timeout 60 "$build/$t" > "$out/$(basename $t).log" 2>&1; step "$(basename $t)" $?
  done
  timeout 240 "$build/tests/gpu_isolation_test" > "$out/gpu_isolation_test.log" 2>&1; step gpu_isolation_test $?
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$out/gpu_isolation_test.log"
  timeout 120 "$build/tests/gpu_sharing_test" > "$out/gpu_sharing_test.log" 2>&1; step gpu_sharing_test $?
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$out/gpu_sharing_test.log"
fi

# ---- 2. two tune run at once, a whole card each
if [[ " $parts " == *" 2 "* ]]; then
  w=$(mktemp -d); chmod 755 "$w"; cp "$here/python/card_holder.py" "$w/"; : > "$w/record.jsonl"; chmod 666 "$w/record.jsonl"
  sample_on "$out/two-smi.txt"
  runs=()
  for who in ann bob; do
    (cd "$w" && timeout 200 "$tune" run --local --metric score --mode max --samples "${SAMPLES:-4}" --gpus-per-trial 1 \
       --progress lines --name "$who" --experiment-dir "$w/$who-exp" --no-working-dir -- \
       "$py" "$w/card_holder.py" --hold-gib 2 --seconds 3 --record "$w/record.jsonl" > "$out/two-$who.json" 2> "$out/two-$who.log") &
    runs+=($!)
    sleep 1
  done
  wait "${runs[@]}"
  sample_off
  cp "$w/record.jsonl" "$out/two-record.jsonl"
  python3 "$here/one_owner_check.py" "$out/two-smi.txt" > "$out/two-check.json"; step "two tune run, one owner per card" $?
  cat "$out/two-check.json"; tail -1 "$out/two-ann.json" "$out/two-bob.json"
  grep -h "waits for its placement" "$out"/two-*.log | head -2
  rm -rf "$w"
fi

# ---- 3. a process holding 100 GiB by hand
if [[ " $parts " == *" 3 "* ]]; then
  timeout 200 python3 "$here/foreign_wait.py" --tune "$tune" --real --gpu 0.5 --hold-gib "${HOLD_GIB:-100}" \
    --repeats "${REPEATS:-5}" > "$out/wait-half.json" 2> "$out/wait-half.log"; step "foreign_wait gpu 0.5" $?
  tail -1 "$out/wait-half.json"
  timeout 120 python3 "$here/foreign_wait.py" --tune "$tune" --real --gpu 1 --hold-gib 2 \
    --repeats 3 > "$out/wait-whole.json" 2> "$out/wait-whole.log"; step "foreign_wait gpu 1 beside 2 GiB" $?
  tail -1 "$out/wait-whole.json"
fi

# ---- 4. pytorch/examples' mnist/main.py, unchanged
if [[ " $parts " == *" 4 "* ]] && [ -n "${MNIST:-}" ] && [ -f "$MNIST" ]; then
  w=$(mktemp -d); chmod 755 "$w"; mkdir -p "$w/mnist" "$w/data/MNIST/raw"; cp "$MNIST" "$w/mnist/main.py"
  # Fashion-MNIST's files under MNIST's names (the same IDX format; no network here).
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    gunzip -c "${TUNE_FASHION_MNIST_DIR:-data/fashion-mnist}/$f.gz" > "$w/data/MNIST/raw/$f"
  done
  common=(--metric correct --mode max --metric-pattern 'Accuracy: (\d+)/10000' --gpus-per-trial 0.25 --progress lines
          --space '{"lr": {"loguniform": [0.3, 3.0]}}')
  (cd "$w/mnist" && timeout 120 "$tune" run --local "${common[@]}" --samples 1 --name copied --experiment-dir "$w/copied-exp" \
     -- "$py" main.py --epochs 1 --lr '${lr}' > "$out/mnist-copied.json" 2> "$out/mnist-copied.log"); step "mnist in a copy (fails)" $?
  grep -h "in-place\|Error\|trials:" "$out/mnist-copied.log" | head -4
  (cd "$w/mnist" && timeout 200 "$tune" run --local "${common[@]}" --samples 4 --in-place --name inplace \
     --experiment-dir "$w/inplace-exp" -- "$py" main.py --epochs 1 --lr '${lr}' > "$out/mnist-inplace.json" \
     2> "$out/mnist-inplace.log"); step "mnist --in-place" $?
  tail -1 "$out/mnist-inplace.json"
  cp "$w/inplace-exp/trials.json" "$out/mnist-inplace-trials.json" 2>/dev/null
  rm -rf "$w"
fi
