#!/usr/bin/env bash
# Issue 23 on the GPU machine, from the repository's root with the build unpacked at its
# absolute path: whether the pooled gradient kernels help the 64-trial CNN run under MPS
# (they help 8 trials at batch 128 in bench_trials), and the remaining repeats.
#   bench/gpu_issue23_pooled.sh BUILD_DIR OUT_DIR
# 1. the 64-trial run under MPS with TUNE_TRAIN_POOLED_GRADS=0 (the node passes it on to
#    its trials), then as shipped (pooled on under MPS), then time-sliced as shipped;
# 2. bench_trials --models cnn --mps --no-torch --repeats 3, pooled off and on;
# 3. bench_overhead --reuse --repeats 3 on this machine's CPUs.
# Everything it wrote: OUT_DIR/all.tgz (one file: the device tool brings back few files).
set -uo pipefail
build=${1:?}; out=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d /tmp/issue23-pooled.XXXXXX)
pack() { (cd "$w" && tar -czf "$out/all.tgz" .); }
trap pack EXIT
step() { echo "== $1: exit $2 ($(date +%T))"; }
summary() { grep -E "^(fixed|auto|fixed-mps|auto-mps) |^\{'auto_vs" "$1" | sed 's/, .timeline.*//'; }
TUNE_TRAIN_POOLED_GRADS=0 SKIP_TESTS=1 timeout 200 bash "$here/gpu_issue23_run.sh" "$build" "$w/run64-mps-pooled0" 64 mps \
  > "$w/run64-mps-pooled0.log" 2>&1; step "64 trials, MPS, pooled off" $?; summary "$w/run64-mps-pooled0.log"
SKIP_TESTS=1 timeout 200 bash "$here/gpu_issue23_run.sh" "$build" "$w/run64-mps" 64 mps > "$w/run64-mps.log" 2>&1
step "64 trials, MPS, as shipped" $?; summary "$w/run64-mps.log"
SKIP_TESTS=1 timeout 200 bash "$here/gpu_issue23_run.sh" "$build" "$w/run64-plain" 64 plain > "$w/run64-plain.log" 2>&1
step "64 trials, time-sliced, as shipped" $?; summary "$w/run64-plain.log"
for p in 0 1; do
  TUNE_TRAIN_POOLED_GRADS=$p timeout 90 "$build/bench/bench_trials" --models cnn --mps --no-torch --repeats 3 --epochs-cnn 12 \
    > "$w/trials-mps-pooled$p.log" 2>&1
  step "bench_trials --mps, pooled=$p" $?; grep -E "^cnn:|^\{" "$w/trials-mps-pooled$p.log" | cut -c1-200
done
timeout 240 "$build/bench/bench_overhead" --reuse --repeats 3 > "$w/overhead.log" 2>&1; step bench_overhead $?
grep -E "run [0-9]|CPU ms" "$w/overhead.log"; tail -1 "$w/overhead.log" | cut -c1-400
