#!/usr/bin/env bash
# Tests what the node image runs, without a container engine (none runs on the
# development machines): `cmake --install` into a prefix (the image's packages hold the
# same files below /usr), then the image's entry point with its bin/ on the PATH, as `docker run`
# would start it: it refuses clearly without LIBTUNE_HEAD or a token, joins a head with
# the token file it is given, and stops cleanly on SIGTERM (`docker stop`).
#
#   deploy/container/test_entrypoint.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: test_entrypoint.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "[container-test] $*"; }
work=$(mktemp -d /tmp/libtune-container-XXXXXX)
chmod 711 "$work"  # a root node runs trials as nobody, in folders below it
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cmake --install "$build" --prefix "$work/usr" > "$work/install.log"
for p in tune tune-train-worker tune-example-fashion-mnist; do
  [ -x "$work/usr/bin/$p" ] || { say "FAILED: cmake --install left out bin/$p"; cat "$work/install.log"; exit 1; }
done
say "ok: cmake --install puts tune, tune-train-worker and tune-example-fashion-mnist in bin/"
export PATH=$work/usr/bin:$PATH
entry=$here/entrypoint.sh

# Bad settings: a clear message and exit code 2.
set +e
msg=$(env -u LIBTUNE_HEAD "$entry" 2>&1); rc=$?
set -e
[ $rc = 2 ] && echo "$msg" | grep -q "set LIBTUNE_HEAD" || { say "FAILED: without LIBTUNE_HEAD: $rc $msg"; exit 1; }
set +e
msg=$(LIBTUNE_HEAD=127.0.0.1:1 LIBTUNE_TOKEN_FILE=$work/none "$entry" 2>&1); rc=$?
set -e
[ $rc = 2 ] && echo "$msg" | grep -q "no cluster token at $work/none" || { say "FAILED: without a token: $rc $msg"; exit 1; }
say "ok: without LIBTUNE_HEAD or a token it says what to set (exit 2)"

export TUNE_RUNTIME_DIR=$work/rt
mkdir -m 711 "$TUNE_RUNTIME_DIR"
out=$(tune start --head --host 127.0.0.1 --port 0 --no-dashboard --token-file "$work/token")
address=$(echo "$out" | sed -n 's/.*head started at \([^ ]*\).*/\1/p')
LIBTUNE_HEAD=$address LIBTUNE_TOKEN_FILE=$work/token LIBTUNE_DIR=$work/var \
  "$entry" --num-gpus 1 --num-cpus 1 > "$work/node.log" 2>&1 &
node=$!; pids+=($node)
for _ in $(seq 1 100); do
  tune status --address "$address" --token-file "$work/token" --json 2>/dev/null | grep -q '"alive_nodes":1' && break
  sleep 0.1
done
tune status --address "$address" --token-file "$work/token" --json | grep -q '"alive_nodes":1' ||
  { say "FAILED: the node did not join"; cat "$work/node.log"; exit 1; }
[ "$(stat -c %a "$work/var")" = 711 ] || { say "FAILED: LIBTUNE_DIR is not private (0711: passable, not listable)"; exit 1; }
say "ok: the entry point's node joined the head with the mounted token"
kill -TERM $node
for _ in $(seq 1 200); do kill -0 $node 2>/dev/null || break; sleep 0.1; done
wait $node && rc=0 || rc=$?
[ $rc = 0 ] && grep -q "leaving the cluster" "$work/node.log" || { say "FAILED: SIGTERM: exit $rc"; cat "$work/node.log"; exit 1; }
tune stop > /dev/null
say "ok: SIGTERM (docker stop) made it leave the cluster and exit 0"
say "passed"
