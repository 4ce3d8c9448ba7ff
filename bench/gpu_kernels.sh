#!/usr/bin/env bash
# The CNN's kernels on the GPU machine (issue 23, "shared cards at full speed"), the
# build unpacked at its absolute path:
#   bench/gpu_kernels.sh BUILD_DIR WORK_DIR OUT_DIR
# Where a step's time goes (tune_train --profile, with and without the fused first conv
# block), one trial alone (3 epochs each way), the GPU tests, 8 tune_train at once
# (bench/gpu_concurrent.sh), then bench_trials --models cnn without and with MPS
# ($TRIALS_ARGS, default --repeats 2 --epochs-cnn 12). OUT_DIR/all.tgz holds WORK_DIR whatever happens.
set -uo pipefail
build=${1:?}; w=${2:?}; out=${3:?}
mkdir -p "$w"
step() { echo "== $1: exit $2 ($(date +%T))"; }
pack() { (cd "$w" && tar -czf "$out/all.tgz" .); }
trap pack EXIT
train=$build/libtune/tune/train/tune_train
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$w/device.txt"
for m in cnn mlp; do
  timeout 60 "$train" --model $m --device cuda --profile 100 > "$w/profile-$m.log" 2>&1; step "profile $m" $?
  cat "$w/profile-$m.log"
done
TUNE_TRAIN_DIRECT_CONV=0 timeout 60 "$train" --model cnn --device cuda --profile 100 > "$w/profile-cnn-cudnn.log" 2>&1
step "profile cnn, first block through cuDNN" $?; cat "$w/profile-cnn-cudnn.log"
for v in 1 0; do
  TUNE_TRAIN_DIRECT_CONV=$v timeout 60 "$train" --model cnn --device cuda --epochs 3 > "$w/train-direct$v.log" 2>&1
  step "train cnn direct=$v" $?; tail -2 "$w/train-direct$v.log"
done
timeout 100 "$build/libtune/tune/train/train_gpu_test" > "$w/train_gpu_test.log" 2>&1; step train_gpu_test $?
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$w/train_gpu_test.log"
timeout 40 "$build/libtune/tune/train/train_data_parallel_test" > "$w/dp_test.log" 2>&1; step train_data_parallel_test $?
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$w/dp_test.log"
timeout 150 bash "$(dirname "$0")/gpu_concurrent.sh" "$build" "$w/concurrent" 8 8 2 > "$w/concurrent.log" 2>&1
step "8 tune_train at once" $?; cat "$w/concurrent.log"
trials_args=${TRIALS_ARGS:---repeats 2 --epochs-cnn 12}
timeout 200 "$build/bench/bench_trials" --models cnn $trials_args > "$w/trials.log" 2>&1; step bench_trials $?
grep -E "^cnn:|^\{" "$w/trials.log"
timeout 200 "$build/bench/bench_trials" --models cnn --mps $trials_args > "$w/trials-mps.log" 2>&1; step bench_trials_mps $?
grep -E "^cnn:|^\{" "$w/trials-mps.log"
