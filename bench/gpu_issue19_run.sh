#!/usr/bin/env bash
# Issue 19 on the GPU machine (from the repository's root, the build unpacked at its
# absolute path): the refactored trial path where real cards are audited — the GPU
# isolation tests (their ends carry the audit's peak and final look, now a typed
# record), the trial tests, the containment tests and escape check of issue 18, and the
# controller's and the live table's unit tests.
#   bench/gpu_issue19_run.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:?}; out=${2:?}
mkdir -p "$out"
# The training workload's data where the machine has no dataset-fashion-mnist package.
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
nvidia-smi -L > "$out/host.txt" 2>&1
"$build/libtune/live_trials_test" > "$out/live_trials_test.log" 2>&1; step live_trials_test $?
"$build/actors/controller_test" > "$out/controller_test.log" 2>&1; step controller_test $?
"$build/tests/gpu_isolation_test" > "$out/gpu_isolation_test.log" 2>&1; step gpu_isolation_test $?
"$build/tests/trial_test" > "$out/trial_test.log" 2>&1; step trial_test $?
"$build/libtune/cgroup_test" > "$out/cgroup_test.log" 2>&1; step cgroup_test $?
"$build/tests/program_test" --gtest_filter='*Contain*:*ForkBomb*:*MemoryHog*:*CpuHog*:*CannotEnforce*:*FallsBack*' \
  > "$out/program_test.log" 2>&1; step program_test $?
bench/gpu_containment_check.sh "$build/nodes/tune" "$out" python3 > "$out/escape.log" 2>&1; step gpu_escape $?
tail -5 "$out/escape.log"
for f in "$out"/*_test.log; do echo "$(basename "$f"): $(grep -E '^\[  (PASSED|FAILED)  \]|tests? (passed|skipped)|SKIPPED' "$f" | tr '\n' ' ')"; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
