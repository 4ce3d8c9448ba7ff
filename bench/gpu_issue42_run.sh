#!/usr/bin/env bash
# Issue 42 on the GPU machine (from the repository's root, the build unpacked at its
# absolute path): the reshaped node and trial actors where real cards are audited and
# shared — the node's start plan and the trial actor's blocking watcher on real GPU
# trials (isolation, sharing between clusters, packing, the trial tests), the actors'
# own tests on the deterministic scheduler (with the typed actors and refusals of the
# issue's last part), and MPS through services (now the one start path of the CLI and
# the embedded cluster).
#   bench/gpu_issue42_run.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:?usage: gpu_issue42_run.sh BUILD_DIR OUT_DIR}; out=${2:?}
mkdir -p "$out"
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
step() { echo "== $1: exit $2 ($(date +%T))"; }
{ nvidia-smi -L; date -u; . /etc/os-release; echo "$PRETTY_NAME"; } > "$out/host.txt" 2>&1
cat "$out/host.txt"
for t in actors/wire_test actors/head_test actors/groups_actor_test actors/controller_test \
         actors/start_plan_test actors/node_actor_test actors/outbox_test actors/trial_actor_test actors/services_test \
         tests/gpu_isolation_test tests/gpu_sharing_test tests/gpu_packing_test tests/trial_test; do
  name=$(basename "$t")
  timeout "${TEST_TIMEOUT:-240}" "$build/$t" > "$out/$name.log" 2>&1; step "$name" $?
done
for f in "$out"/*_test.log; do
  echo "$(basename "$f"): $(grep -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]' "$f" | tr '\n' ' ')"
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
echo "left on the cards after the run:"; cat "$out/after.txt"
