#!/usr/bin/env bash
# Ray Tune 2.60's own mnist_pytorch.py (PyTorch, one GPU per trial with --cuda), with
# only its import lines changed (run_examples.py's rules), run by libtune from its wheel
# on a machine with GPUs and PyTorch that never saw the source (the GPU machine):
#
#   gpu_mnist_pytorch.sh WHEEL EXAMPLES_DIR DATA_DIR OUT_DIR [ARGS...]
#
# WHEEL: libtune's wheel (cloudpickle's beside it when the interpreter lacks it);
# EXAMPLES_DIR: ray/tune/examples of the ray wheel (fetch_examples.sh); DATA_DIR:
# MNIST-format idx files (*.gz), put where torchvision's datasets.MNIST("~/data") finds
# them, so that it downloads nothing (there is no network there); OUT_DIR: the log and
# trials.json. ARGS go to the script (default --cuda). PYTHON: the interpreter with
# PyTorch (default python3).
#
# Root only: trials run as an account of their own with a home (useradd), as a node
# run by root runs them (docs/users.md); a head and a node of this machine are started
# with `tune start` (the script's ray.init() joins them) and stopped at the end. Then
# gpu_hooks_torch.py (beside this) on the same cluster: the hooks with PyTorch trials.
set -euo pipefail
wheel=$1 examples=$2 data=$3 out=$4
shift 4
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--cuda)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
user=libtune-trials
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1

id "$user" > /dev/null 2>&1 || useradd -m "$user"
home=$(getent passwd "$user" | cut -d: -f6)
mkdir -p "$home/data/MNIST/raw"
for f in "$data"/*.gz; do gunzip -c "$f" > "$home/data/MNIST/raw/$(basename "${f%.gz}")"; done
chown -R "$user:" "$home"

# The wheel into this interpreter's environment (PyTorch is there), nothing fetched.
"$python" -m pip install --no-index --find-links "$(dirname "$wheel")" --force-reinstall -q "$wheel"
bin=$(dirname "$(command -v "$python")")
tune=$bin/tune
echo "tune: $tune ($("$tune" --version))"

work=$(mktemp -d /tmp/libtune-gpu-mnist-XXXXXX)
chmod 755 "$work"
finish() { "$tune" stop --grace 5 > /dev/null 2>&1 || true; rm -rf "$work"; }
trap finish EXIT
PYTHONPATH=$here "$python" - "$examples/mnist_pytorch.py" "$work/mnist_pytorch.py" <<'PY'
import sys
from run_examples import rewrite
with open(sys.argv[1]) as f:
    text = rewrite(f.read())
with open(sys.argv[2], "w") as f:
    f.write(text)
PY
diff "$examples/mnist_pytorch.py" "$work/mnist_pytorch.py" || true

port=6390
"$tune" start --head --port $port --host 127.0.0.1 --no-dashboard
"$tune" start --address 127.0.0.1:$port --trial-user "$user" --token-file "$HOME/.tune/node-token"
"$tune" status --address 127.0.0.1:$port
nvidia-smi --query-gpu=index,name,memory.used --format=csv || true

cd "$work"
start=$(date +%s%N)
rc=0
timeout "${MNIST_TIMEOUT:-900}" "$python" mnist_pytorch.py "${args[@]}" || rc=$?
end=$(date +%s%N)
echo "mnist_pytorch.py: exit $rc, wall $(( (end - start) / 1000000 )) ms"
nvidia-smi --query-gpu=index,memory.used --format=csv || true
if [ -f "$HOME/libtune_results/exp/trials.json" ]; then cp "$HOME/libtune_results/exp/trials.json" "$out/"; fi
# Then the hooks with PyTorch trials on the cards (gpu_hooks_torch.py beside this).
start=$(date +%s%N)
rc2=0
"$python" "$here/gpu_hooks_torch.py" || rc2=$?
end=$(date +%s%N)
echo "gpu_hooks_torch.py: exit $rc2, wall $(( (end - start) / 1000000 )) ms"
nvidia-smi --query-gpu=index,memory.used --format=csv || true
[ $rc -eq 0 ] && [ $rc2 -eq 0 ]
