#!/usr/bin/env bash
# Issue 23's whole GPU session in one command (device time is short): the training
# GPU tests (cuDNN choices kept per machine), gpu_issue23_run.sh (auto-packing tests,
# the 64-trial runs plain and under MPS), bench_trials for the CNN without and with
# MPS, bench_failover. Each step has its own time limit; OUT_DIR/all.tgz is written
# whatever happens.
#   bench/gpu_issue23_all.sh BUILD_DIR WORK_DIR OUT_DIR
set -uo pipefail
build=${1:?}; w=${2:?}; out=${3:?}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$w"
step() { echo "== $1: exit $2 ($(date +%T))"; }
pack() { (cd "$w" && tar -czf "$out/all.tgz" --exclude='*/checkpoints' --exclude='*/trials' . ); }
trap pack EXIT
rm -rf "/dev/shm/libtune-$(id -u)"
timeout 100 "$build/libtune/tune/train/train_gpu_test" > "$w/train_gpu_test.log" 2>&1; step train_gpu_test $?
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$w/train_gpu_test.log"
rm -rf "/dev/shm/libtune-$(id -u)"  # the tuning runs start without the tests' choices
timeout 250 bash "$here/gpu_issue23_run.sh" "$build" "$w/runs" 64 "plain mps" > "$w/runs.log" 2>&1; step runs $?
tail -14 "$w/runs.log"
cat "/dev/shm/libtune-$(id -u)"/cudnn-algos-*.txt > "$w/cudnn-algos.txt" 2>/dev/null
timeout 85 "$build/bench/bench_trials" --models cnn > "$w/trials.log" 2>&1; step bench_trials $?
tail -1 "$w/trials.log"
timeout 85 "$build/bench/bench_trials" --models cnn --mps > "$w/trials-mps.log" 2>&1; step bench_trials_mps $?
tail -1 "$w/trials-mps.log"
timeout 45 "$build/bench/bench_failover" --repeats 3 > "$w/failover.log" 2>&1; step bench_failover $?
tail -1 "$w/failover.log"
