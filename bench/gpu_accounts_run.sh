#!/usr/bin/env bash
# Trials as unprivileged accounts (issue 21) on the GPU machine, from the repository's
# root with the build unpacked at its absolute path: a root node runs its trials as
# nobody, or as their user's account, on real cards — the GPU isolation tests (the audit
# finds trials by PID, whoever they run as), MPS (a root daemon serving nobody's
# trials), the containment escape check, the PyTorch example (torch imported and CUDA
# used as nobody), the users' cluster test with real accounts, and the process tests.
#   bench/gpu_accounts_run.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:?}; out=${2:?}
mkdir -p "$out"
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
{ nvidia-smi -L; id; id nobody; ls -ld /dev/nvidia* | head -5; command -v useradd; stat -c '%A %U %n' / "$PWD" "$PWD/.." ; } > "$out/host.txt" 2>&1
cat "$out/host.txt"
"$build/libtune/account_test" > "$out/account_test.log" 2>&1; step account_test $?
"$build/libtune/process_test" > "$out/process_test.log" 2>&1; step process_test $?
"$build/libtune/mps_test" > "$out/mps_test.log" 2>&1; step mps_test $?
"$build/tests/gpu_isolation_test" > "$out/gpu_isolation_test.log" 2>&1; step gpu_isolation_test $?
"$build/tests/trial_test" > "$out/trial_test.log" 2>&1; step trial_test $?
"$build/tests/users_cluster_test" --gtest_filter='*NeverAsRoot*:*Checkpoints*' > "$out/users_cluster_test.log" 2>&1
step users_cluster_test $?
bench/gpu_containment_check.sh "$build/nodes/tune" "$out" python3 > "$out/escape.log" 2>&1; step gpu_escape $?
tail -3 "$out/escape.log"
PROGRAM_TEST=0 BENCH_OVERHEAD=0 bench/gpu_pytorch_check.sh "$build" "$out/pytorch" > "$out/pytorch.log" 2>&1; step pytorch $?
grep -E "tune run exit|test_acc|as nobody" "$out/pytorch.log" | head -5
for f in "$out"/*_test.log; do echo "$(basename "$f"): $(grep -E '^\[  (PASSED|FAILED)  \]|SKIPPED \]' "$f" | sort | uniq -c | tr '\n' ' ')"; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
