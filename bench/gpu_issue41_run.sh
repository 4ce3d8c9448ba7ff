#!/usr/bin/env bash
# Issue 41 on the GPU machine (Ubuntu 24.04, Python 3.12, PyTorch from pip; no CAF, no
# apt, no network): the wheel built on the development machine, installed with pip into
# a fresh virtual environment there, used as a Python user would.
#
#   bench/gpu_issue41_run.sh WHEEL_DIR DATA OUT_DIR
#
# WHEEL_DIR: libtune-*.whl and cloudpickle-*.whl (pip installs from it, offline);
# DATA: Fashion-MNIST (the IDX files). Steps:
# 1. python3 -m venv (seeing the folder where PyTorch was pip-installed), pip install
#    --no-index the wheel; the installed tune: --version, what its loader resolves.
# 2. python/tests/wheel_smoke.py (a Ray-style script on the CPU).
# 3. examples/pytorch/tune_ray_style.py: 8 trials of a PyTorch function trainable at
#    with_resources(..., {"gpu": 0.25}), ASHA: each trial reports what CUDA shows it, the
#    node's audit its GPU memory peak.
# 4. nvidia-smi afterwards: nothing left on the card.
set -uo pipefail
wheels=$(readlink -f "${1:?usage: gpu_issue41_run.sh WHEEL_DIR DATA OUT_DIR}")
data=$(readlink -f "${2:?}"); out=${3:?}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mkdir -p "$out"; out=$(readlink -f "$out")
step() { echo "== $1: exit $2 ($(date +%T))"; }
export TUNE_FASHION_MNIST_DIR=$data TUNE_SHARED_DIR=/tmp/tune-issue41-shared TUNE_RUNTIME_DIR=/tmp/tune-issue41-rt
unset LD_LIBRARY_PATH
{ nvidia-smi -L; date -u; . /etc/os-release; echo "$PRETTY_NAME"; python3 --version
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$out/host.txt" 2>&1
cat "$out/host.txt"

# ---- 1. a fresh virtual environment, the wheel
v=/tmp/venv-issue41; rm -rf "$v"
python3 -m venv "$v" > "$out/venv.log" 2>&1; step "python3 -m venv" $?
# PyTorch is pip-installed in another virtual environment there (/opt/torch/.venv) and
# nothing can be downloaded: the new one sees that site-packages folder through a .pth
# file (what `pip install torch` would have put in it).
torch_site=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
echo "$torch_site" > "$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch-site.pth"
echo "torch from $torch_site" | tee -a "$out/venv.log"
start=$(date +%s.%N)
"$v/bin/pip" install --no-index --find-links "$wheels" libtune > "$out/pip.log" 2>&1; rc=$?
echo "pip install s: $(python3 -c "print(round($(date +%s.%N) - $start, 1))")" | tee -a "$out/pip.log"
step "pip install --no-index libtune (the wheel)" $rc; tail -2 "$out/pip.log"
chmod -R a+rX "$v"
"$v/bin/tune" --version > "$out/version.txt" 2>&1; step "installed tune --version: $(cat "$out/version.txt")" $?
bin=$("$v/bin/python" -c "from libtune._engine_path import tune_binary; print(tune_binary())")
echo "the engine: $bin"; ldd "$bin" > "$out/ldd.txt" 2>&1
grep -E "not found|libtune" "$out/ldd.txt"; echo "libraries from the wheel: $(grep -c 'libtune' "$out/ldd.txt")"

# ---- 2. the Ray-style smoke script (CPU)
w=$(mktemp -d); chmod 755 "$w"
(cd "$w" && timeout 300 "$v/bin/python" "$repo/python/tests/wheel_smoke.py" "$w/smoke" > "$out/smoke.out" 2> "$out/smoke.log")
step "wheel_smoke.py" $?; tail -2 "$out/smoke.out"

# ---- 3. PyTorch trials at a quarter card each
p=$(mktemp -d); chmod 755 "$p"; cp "$repo/examples/pytorch/"{train.py,tune_ray_style.py} "$p/"
start=$(date +%s.%N)
(cd "$p" && timeout 500 "$v/bin/python" tune_ray_style.py --samples 8 --gpu 0.25 --epochs 4 --storage "$p/results" \
   > "$out/pytorch.jsonl" 2> "$out/pytorch.log")
rc=$?; echo "wall_s $(python3 -c "print(round($(date +%s.%N) - $start, 1))")" | tee "$out/pytorch-time.txt"
step "tune_ray_style.py: 8 trials, with_resources gpu 0.25" $rc
cat "$out/pytorch.jsonl"; tail -3 "$out/pytorch.log"
cp "$p"/results/*/trials.json "$out/trials.json" 2>/dev/null

# ---- 4. the card afterwards
sleep 2; nvidia-smi --query-gpu=index,memory.used --format=csv > "$out/after.txt" 2>&1; cat "$out/after.txt"
(cd "$out" && tar -czf all.tgz --exclude=all.tgz . 2>/dev/null)
