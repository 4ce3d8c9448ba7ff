#!/bin/sh
# The node image's entry point: a libtune node (in the foreground) that joins the head at
# $LIBTUNE_HEAD with the token in $LIBTUNE_TOKEN_FILE (default /run/secrets/libtune-token,
# where `docker run --secret` / Kubernetes secrets put it), offering the GPUs the container
# was given (docker run --gpus ...: they are the ones CUDA shows it). Trials' folders go
# to /var/lib/libtune (mount a volume there for checkpoints). Extra arguments are passed
# to `tune start` (e.g. --num-cpus 16 --mps). `docker stop` sends SIGTERM: the node
# leaves the cluster and stops its trials.
set -eu
if [ -z "${LIBTUNE_HEAD:-}" ]; then
  echo "libtune node: set LIBTUNE_HEAD=HOST:PORT (the head to join), e.g. docker run -e LIBTUNE_HEAD=10.0.0.1:6380 ..." >&2
  exit 2
fi
token=${LIBTUNE_TOKEN_FILE:-/run/secrets/libtune-token}
if [ ! -r "$token" ]; then
  echo "libtune node: no cluster token at $token: mount the head's token file there" \
       "(docker run --mount type=bind,src=\$HOME/.tune/token,dst=$token,readonly) or set LIBTUNE_TOKEN_FILE" >&2
  exit 2
fi
dir=${LIBTUNE_DIR:-/var/lib/libtune}
# Others may pass (the trials run as nobody below it), not list it: 0711.
mkdir -p "$dir" && chmod 711 "$dir"
exec tune start --address "$LIBTUNE_HEAD" --token-file "$token" --runtime-dir "$dir" --block "$@"
