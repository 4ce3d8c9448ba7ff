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
# The machine's Open MPI settings (OMPI_MCA_*, PMIX_MCA_*: its container sets
# OMPI_MCA_plm=isolated) go to the trials: Lightning's MPI detection (mpi4py) aborts a
# trial without them (bench/results/2026-12-05-gpu-issue43.md).
mca=$(env | grep -oE "^(OMPI|PMIX)_MCA_[A-Za-z0-9_]*" | sed 's/^/--env /' | tr '\n' ' ')
echo "forwarded to the Lightning trials: ${mca:-nothing}"
ft --only lightning $mca --out "$out/lightning.json" > "$out/lightning.log" 2>&1
echo "== lightning: exit $? ($(date +%T))"; tail -3 "$out/lightning.log"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after.txt" 2>&1
echo "left on the cards after the run:"; cat "$out/after.txt"
