#!/usr/bin/env bash
# Everything issue 18 runs on the GPU machine, in one go (from the repository's root,
# the build unpacked at its absolute path): the cgroup layout seen there, the containment
# unit tests, the GPU escape check (bench/gpu_containment_check.sh), the containment and
# GPU isolation tests, bench_start (cgroup vs subreaper), the cost of each cgroup step and bench_overhead with
# cgroups and with the subreaper.
#   bench/gpu_containment_run.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:?}; out=${2:?}
mkdir -p "$out"
step() { echo "== $1: exit $2 ($(date +%T))"; }
{ cat /proc/self/cgroup; mount | grep cgroup; cat /sys/fs/cgroup/cgroup.subtree_control; nvidia-smi -L; } > "$out/host.txt" 2>&1
"$build/libtune/cgroup_test" > "$out/cgroup_test.log" 2>&1; step cgroup_test $?
bench/gpu_containment_check.sh "$build/nodes/tune" "$out" python3 > "$out/escape.log" 2>&1; step gpu_escape $?
cat "$out/escape.log"
"$build/tests/program_test" --gtest_filter='*Contain*:*ForkBomb*:*MemoryHog*:*CpuHog*:*CannotEnforce*:*Sigkill*:*FallsBack*' \
  > "$out/program_test.log" 2>&1; step program_test $?
"$build/tests/gpu_isolation_test" > "$out/gpu_isolation_test.log" 2>&1; step gpu_isolation_test $?
"$build/bench/bench_start" --trials 40 > "$out/bench_start.json" 2> "$out/bench_start.err"; step bench_start $?
cat "$out/bench_start.json"
python3 bench/python/cgroup_cost.py 40 > "$out/cgroup_cost.json" 2>&1; step cgroup_cost $?
cat "$out/cgroup_cost.json"
for mode in cgroup subreaper; do
  "$build/bench/bench_overhead" --both --repeats 1 --containment $mode > "$out/bench_overhead-$mode.json" 2> "$out/bench_overhead-$mode.err"
  step "bench_overhead $mode" $?
  tail -1 "$out/bench_overhead-$mode.json"
done
ls /sys/fs/cgroup/libtune 2>/dev/null > "$out/cgroups-after.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$out/cgroups-after.txt" 2>&1
