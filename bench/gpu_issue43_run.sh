#!/usr/bin/env bash
# Issue 43 on the GPU machine (from the repository's root, the build unpacked at its
# absolute path; PyTorch, Lightning and transformers are installed there): a Lightning
# script and a Hugging Face Trainer script (examples/integrations/) tuned by `tune run`
# through their one callback each at 0.25 GPU per trial with ASHA
# (tests/trackers/frameworks_test.py), then what is left on the cards.
#   bench/gpu_issue43_run.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=${1:?usage: gpu_issue43_run.sh BUILD_DIR OUT_DIR}; out=${2:?}
mkdir -p "$out"
[ -d data/fashion-mnist ] && export TUNE_FASHION_MNIST_DIR=${TUNE_FASHION_MNIST_DIR:-$PWD/data/fashion-mnist}
{ nvidia-smi -L; date -u; . /etc/os-release; echo "$PRETTY_NAME"
  python3 -c "import torch, lightning, transformers; print('torch', torch.__version__, 'lightning', lightning.__version__, 'transformers', transformers.__version__)"
} > "$out/host.txt" 2>&1
cat "$out/host.txt"
ft() { timeout 270 python3 tests/trackers/frameworks_test.py --tune "$build/nodes/tune" --gpu 0.25 "$@"; }
ft --only hf_trainer --out "$out/hf_trainer.json" > "$out/hf_trainer.log" 2>&1
echo "== hf_trainer: exit $? ($(date +%T))"; tail -3 "$out/hf_trainer.log"
ft --only lightning --out "$out/lightning.json" > "$out/lightning.log" 2>&1; rc=$?
echo "== lightning: exit $rc ($(date +%T))"; tail -3 "$out/lightning.log"
# Open MPI refuses to start as root: Lightning's MPI detection (mpi4py) aborts a trial
# run as root unless these say yes (tried only when the plain run failed that way).
if [ $rc -ne 0 ] && grep -q "MPI_INIT" "$out/lightning.log"; then
  ft --only lightning --env OMPI_ALLOW_RUN_AS_ROOT=1 --env OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    --out "$out/lightning_root.json" > "$out/lightning_root.log" 2>&1
  echo "== lightning with OMPI_ALLOW_RUN_AS_ROOT: exit $? ($(date +%T))"; tail -3 "$out/lightning_root.log"
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
echo "left on the cards after the run:"; cat "$out/after.txt"
