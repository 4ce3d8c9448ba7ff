#!/usr/bin/env bash
# Issue 23 with reused workers, on the GPU machine, in device calls of at most 10
# minutes (the build unpacked at its absolute path):
#   bench/gpu_issue23_reuse.sh BUILD_DIR WORK_DIR OUT_DIR PHASE
# PHASE 1: the training and packing GPU tests, the GPU tests of reused workers, and
#          repeat 1 of the 64-trial runs (fixed 0.25 and auto, plain and MPS), reused workers.
# PHASE 2: repeats 2 and 3, then bench_trials (CNN, without and with MPS).
# PHASE 3: one repeat with --reuse-workers 0 (the comparison), bench_failover, and
#          bench_overhead on this machine's CPUs (plain and reused, 3 repeats each).
# OUT_DIR/all.tgz holds WORK_DIR (without checkpoints and trial folders) whatever happens.
set -uo pipefail
build=${1:?}; w=${2:?}; out=${3:?}; phase=${4:?}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$w"
step() { echo "== $1: exit $2 ($(date +%T))"; }
pack() { (cd "$w" && tar -czf "$out/all.tgz" --exclude='*/checkpoints' --exclude='*/trials' . ); }
trap pack EXIT
case "$phase" in
1)
  rm -rf "/dev/shm/libtune-$(id -u)"
  timeout 100 "$build/libtune/tune/train/train_gpu_test" > "$w/train_gpu_test.log" 2>&1; step train_gpu_test $?
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$w/train_gpu_test.log"
  rm -rf "/dev/shm/libtune-$(id -u)"  # the tuning runs start without the tests' choices
  timeout 330 bash "$here/gpu_issue23_run.sh" "$build" "$w/rep1" 64 "plain mps" > "$w/rep1.log" 2>&1; step rep1 $?
  tail -6 "$w/rep1.log"
  ;;
2)
  for r in 2 3; do
    SKIP_TESTS=1 timeout 170 bash "$here/gpu_issue23_run.sh" "$build" "$w/rep$r" 64 "plain mps" > "$w/rep$r.log" 2>&1; step rep$r $?
    tail -1 "$w/rep$r.log"
  done
  timeout 85 "$build/bench/bench_trials" --models cnn > "$w/trials.log" 2>&1; step bench_trials $?
  tail -1 "$w/trials.log"
  timeout 85 "$build/bench/bench_trials" --models cnn --mps > "$w/trials-mps.log" 2>&1; step bench_trials_mps $?
  tail -1 "$w/trials-mps.log"
  ;;
3)
  SKIP_TESTS=1 FASHION_ARGS="--reuse-workers 0" timeout 200 bash "$here/gpu_issue23_run.sh" "$build" "$w/fresh" 64 "plain mps" \
    > "$w/fresh.log" 2>&1; step fresh $?
  tail -1 "$w/fresh.log"
  timeout 45 "$build/bench/bench_failover" --repeats 3 > "$w/failover.log" 2>&1; step bench_failover $?
  tail -1 "$w/failover.log"
  timeout 240 "$build/bench/bench_overhead" --reuse --repeats 3 > "$w/overhead.log" 2>&1; step bench_overhead $?
  tail -1 "$w/overhead.log"
  ;;
*) echo "PHASE must be 1, 2 or 3" >&2; exit 2 ;;
esac
