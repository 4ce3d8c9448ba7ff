#!/usr/bin/env bash
# N tune_train processes on one card at once, without and with a CUDA MPS daemon, and
# with the fused kernels on and off (TUNE_TRAIN_DIRECT_CONV): the card's aggregate
# training samples/s with no cluster in between (the kernels' own share of
# bench_trials' figures). On the GPU machine:
#   bench/gpu_concurrent.sh BUILD_DIR WORK_DIR [N=8] [EPOCHS=8] [REPEATS=2]
# Aggregate = sum over the processes of their median per-epoch samples/s over epochs
# 3..EPOCHS (all processes start together; a short first epoch is left out).
set -uo pipefail
build=${1:?}; w=${2:?}; n=${3:-8}; epochs=${4:-8}; repeats=${5:-2}
train=$build/libtune/tune/train/tune_train
mkdir -p "$w"
aggregate() {  # files...: the sum of each file's median epoch rate (epochs >= 3)
  python3 - "$@" <<'PY'
import re, statistics, sys
total = 0.0
for f in sys.argv[1:]:
    rates = [float(m.group(2)) for m in re.finditer(r"^epoch (\d+) .* (\d+) samples/s", open(f).read(), re.M) if int(m.group(1)) >= 3]
    if not rates:
        print(f"{f}: no epochs", file=sys.stderr); sys.exit(1)
    total += statistics.median(rates)
print(f"{total:.0f}")
PY
}
run_set() {  # tag direct
  local tag=$1 direct=$2 pids=() i
  for i in $(seq 1 "$n"); do
    TUNE_TRAIN_DIRECT_CONV=$direct timeout 120 "$train" --model cnn --device cuda --epochs "$epochs" --seed "$i" \
      > "$w/$tag.$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  echo "$tag: $(aggregate "$w/$tag".*.log) samples/s"
}
for mode in plain mps; do
  if [ $mode = mps ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$w/mps-pipe CUDA_MPS_LOG_DIRECTORY=$w/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || { echo "no MPS daemon"; continue; }
  fi
  for r in $(seq 1 "$repeats"); do
    run_set "$mode-fused-r$r" 1
    run_set "$mode-library-r$r" 0
  done
  if [ $mode = mps ]; then echo quit | nvidia-cuda-mps-control; fi
done
