#!/usr/bin/env bash
# A tour of a libtune cluster on this machine: a head and two nodes on loopback (one
# with logical GPUs, one with this machine's real GPUs if it has any), `tune status`,
# placement groups (one placed across nodes, one waiting, one that can never fit),
# a node killed with SIGKILL and seen dead, then everything stopped.
# Usage: cluster_tour.sh PATH/TO/tune
set -euo pipefail
tune=${1:?usage: cluster_tour.sh PATH/TO/tune}
work=$(mktemp -d /tmp/libtune-tour-XXXXXX)
chmod 711 "$work"  # a root node runs trials as nobody, in folders below it
export TUNE_RUNTIME_DIR=$work TUNE_TOKEN_FILE=$work/token
trap '"$tune" stop --grace 5 >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
echo "== tune start --head --host 127.0.0.1 --port 0   (any free port)"
"$tune" start --head --host 127.0.0.1 --port 0 | tee "$work/head.out"
address=$(grep -o 'head started at [^ ]*' "$work/head.out" | cut -d' ' -f4)
echo; echo "== tune start --address $address --num-gpus 4 --resources '{\"tpu\": 2}'"
"$tune" start --address "$address" --num-gpus 4 --resources '{"tpu": 2}' | tee "$work/a.out"
echo; echo "== tune start --address $address   (this machine's own GPUs, if any)"
"$tune" start --address "$address" | tee "$work/b.out"
echo; echo "== tune group create --bundles '[{\"gpu\": 1, \"tpu\": 1}, {\"gpu\": 1, \"tpu\": 1}]' --strategy STRICT_PACK --wait 5"
"$tune" group create --address "$address" --id tour-pack --bundles '[{"gpu": 1, "tpu": 1}, {"gpu": 1, "tpu": 1}]' \
  --strategy STRICT_PACK --wait 5
echo; echo "== tune group create --bundles '[{\"gpu\": 2, \"tpu\": 1}]'   (waits: the TPU node's TPUs are held)"
"$tune" group create --address "$address" --id tour-wait --bundles '[{"gpu": 2, "tpu": 1}]'
echo; echo "== tune group create --bundles '[{\"gpu\": 64}]'   (can never fit: fails at once)"
"$tune" group create --address "$address" --bundles '[{"gpu": 64}]' || true
sleep 0.6  # one heartbeat: the nodes report what they hold
echo; echo "== tune status"
"$tune" status --address "$address"
echo; echo "== tune group remove tour-pack   (tour-wait is placed at once)"
"$tune" group remove tour-pack --address "$address"
"$tune" group get tour-wait --address "$address"
"$tune" group remove tour-wait --address "$address"
pid=$(grep -o '(pid [0-9]*)' "$work/b.out" | tr -dc 0-9)
echo; echo "== kill -9 $pid; 0.2 s later:"
kill -9 "$pid"
sleep 0.2
"$tune" status --address "$address" | sed -n '/^Nodes/,/^$/p'
echo "== tune stop"
"$tune" stop
