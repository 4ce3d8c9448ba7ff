#!/usr/bin/env bash
# On the GPU machine: the dashboard's GPU view against real cards, and a node started the
# way deploy/slurm/libtune.sbatch starts one under Slurm (CUDA_VISIBLE_DEVICES=1, then
# --num-gpus 1): it must offer physical GPU 1 (its UUID), no other card, and the
# dashboard must show each trial on it with the memory the GPU audit measured.
#
#   bench/gpu_dashboard_check.sh BIN_DIR OUT_DIR   (BIN_DIR: tune, fashion_mnist)
set -uo pipefail
bin=${1:?}; out=${2:?}
mkdir -p "$out"
export TUNE_RUNTIME_DIR=/tmp/tune-gpu-rt; rm -rf "$TUNE_RUNTIME_DIR"; mkdir -m 711 "$TUNE_RUNTIME_DIR"
tok=$TUNE_RUNTIME_DIR/token
nvidia-smi -L | tee "$out/nvidia-smi.txt"
want=$(nvidia-smi --query-gpu=index,uuid --format=csv,noheader | awk -F', ' '$1 == 1 {print $2}')
h=$("$bin/tune" start --head --host 127.0.0.1 --port 0 --dashboard-port 0 --token-file "$tok")
echo "$h"
addr=$(echo "$h" | sed -n 's/.*head started at \([^ ]*\).*/\1/p')
dash=$(echo "$h" | sed -n 's/.*dashboard: *\(http[^ ]*\).*/\1/p')
CUDA_VISIBLE_DEVICES=1 "$bin/tune" start --address "$addr" --token-file "$tok" --num-gpus 1 --num-cpus 8
"$bin/tune" status --address "$addr" --token-file "$tok" | tee "$out/status.txt"
got=$("$bin/tune" status --address "$addr" --token-file "$tok" --json | python3 -c 'import json,sys; print(",".join(g["uuid"] for n in json.load(sys.stdin)["nodes"] for g in n["gpus"]))')
echo "physical GPU 1: $want; the node offers: $got"
[ "$got" = "$want" ] && echo "CHECK ok: CUDA_VISIBLE_DEVICES=1 -> the node offers exactly physical GPU 1" || echo "CHECK FAILED: the node offers $got"
"$bin/fashion_mnist" --address "$addr" --token-file "$tok" --samples 8 --epochs 6 --gpus-per-trial 0.25 \
  --progress lines --experiment-dir /tmp/tune-gpu-exp > "$out/fashion_mnist.txt" 2>&1 &
prog=$!
H="Authorization: Bearer $(cat "$tok")"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  sleep 2
  curl -s -H "$H" "${dash}api/gpus" > "$out/api-gpus.json"
  python3 - "$out/api-gpus.json" <<'PY' && break
import json, sys
g = json.load(open(sys.argv[1]))
held = [h for c in g for h in c["holders"] if h["trial"]]
sys.exit(0 if held and all(h["memory_used"] for h in held) else 1)
PY
done
python3 - "$out/api-gpus.json" "$want" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); want = sys.argv[2]
for c in g:
    print(f'{c["node"]} gpu {c["index"]} {c["uuid"]} {c["name"]}: allocated {c["allocated"]}, memory used {c["memory_used"]}')
    for h in c["holders"]:
        print(f'   {h["trial"]}: share {h["share"]}, quota {h["memory_quota"]>>20} MiB, uses {(h["memory_used"] or 0)>>20} MiB')
held = [h for c in g for h in c["holders"] if h["trial"]]
ok = held and all(h["memory_used"] for h in held) and all(c["uuid"] == want for c in g)
print("CHECK", "ok: every running trial on GPU 1 shows the memory the audit measured" if ok else "FAILED")
PY
curl -s -H "$H" "${dash}api/cluster" > "$out/api-cluster.json"
curl -s -H "$H" "${dash}metrics" > "$out/metrics.txt"
grep -E "^libtune_(gpu_memory_used_bytes|gpus_allocated|trials)" "$out/metrics.txt"
wait $prog; echo "fashion_mnist exit $?"; tail -1 "$out/fashion_mnist.txt"
curl -s -H "$H" "${dash}api/experiments" > "$out/api-experiments.json"
"$bin/tune" stop
