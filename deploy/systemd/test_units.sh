#!/usr/bin/env bash
# Tests the systemd units: `systemd-analyze verify` reads them (syntax, directives,
# the program they start), then each unit's ExecStartPre and ExecStart run as systemd
# would run them (specifiers %S and %d and the Environment= settings expanded; the
# token handed over as a credential): the head starts, the node reads the token from
# its credentials directory and joins, and SIGTERM to each main process (KillMode=mixed)
# stops them cleanly, the node first.
#
#   deploy/systemd/test_units.sh TUNE_PROGRAM
#
# Exits 77 (skipped) without systemd-analyze. Everything listens on loopback only.
set -euo pipefail
SKIP=77
tune=${1:?usage: test_units.sh TUNE_PROGRAM}
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "[systemd-test] $*"; }
command -v systemd-analyze >/dev/null || { say "skipped: systemd-analyze is missing"; exit $SKIP; }

work=$(mktemp -d /tmp/libtune-systemd-XXXXXX)

chmod 711 "$work"  # a root node runs trials as nobody, in folders below it
pids=()
# Delegate=yes: systemd starts the unit in a cgroup of its own, which the node may
# divide. Done here as systemd does it, where this runs as root with cgroup2 mounted.
cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
delegated=""
if [ -n "$cg2" ] && [ -w "$cg2/cgroup.procs" ]; then
  delegated=$cg2/libtune-systemd-test-$$.slice/libtune-node.service
fi
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ -n "$delegated" ] && [ -d "$delegated" ]; then
    find "$delegated" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    rmdir "$(dirname "$delegated")" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# The units as installed, with this build's tune for /usr/local/bin/tune.
for u in libtune-head libtune-node; do
  sed "s|/usr/local/bin/tune|$tune|g" "$here/$u.service" > "$work/$u.service"
done
out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$work/libtune-head.service" "$work/libtune-node.service" 2>&1 || true)
# Lines about the machine itself (no systemd running, units of the host) are not ours.
ours=$(echo "$out" | grep -F "$work" || true)
if [ -n "$ours" ]; then
  say "FAILED: systemd-analyze verify:"; echo "$ours"; exit 1
fi
say "ok: systemd-analyze verify accepts both units"

# One directive of a unit (the last one wins, as in systemd).
directive() { grep -E "^$2=" "$work/$1.service" | tail -1 | cut -d= -f2-; }
# Runs a command line the way systemd would: specifiers, then environment variables
# (${X} as one word, $X split into words), in the unit's environment. It execs: call it
# in a subshell or in the background.
run_line() {
  local unit=$1 line=$2
  line=${line//%S/$work/state}
  line=${line//%d/$work/creds-$unit}
  {
    # Environment= (space-separated assignments), then the EnvironmentFile.
    for kv in $(directive "$unit" Environment); do export "$kv"; done
    envfile=$(directive "$unit" EnvironmentFile); envfile=${envfile#-}
    envfile=$work/etc/$(basename "$envfile")
    # KEY=VALUE lines, the value as written (systemd does not split it; quotes go).
    if [ -f "$envfile" ]; then
      while IFS= read -r kv; do
        [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || continue
        v=${kv#*=}; v=${v#\"}; v=${v%\"}
        export "${kv%%=*}=$v"
      done < "$envfile"
    fi
    if [ "$(directive "$unit" Delegate)" = yes ] && [ -n "$delegated" ]; then
      mkdir -p "$delegated" && echo $BASHPID > "$delegated/cgroup.procs"
    fi
    eval "exec $line"
  }
}

mkdir -p -m 0700 "$work/state/libtune" "$work/etc"
mkdir -p -m 0711 "$work/state/libtune-node"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "LIBTUNE_PORT=$port
LIBTUNE_HEAD_ARGS=--host 127.0.0.1 --dashboard-port 0" > "$work/etc/head.env"
echo "LIBTUNE_HEAD=127.0.0.1:$port
LIBTUNE_NODE_ARGS=--num-gpus 2 --num-cpus 2" > "$work/etc/node.env"

(run_line libtune-head "$(directive libtune-head ExecStartPre)")
run_line libtune-head "$(directive libtune-head ExecStart)" > "$work/head.log" 2>&1 &
head_pid=$!; pids+=($head_pid)
token=$work/state/libtune/token
for _ in $(seq 1 100); do [ -s "$token" ] && break; sleep 0.1; done
[ -s "$token" ] || { say "FAILED: the head made no token"; cat "$work/head.log"; exit 1; }
[ "$(stat -c %a "$token")" = 600 ] || { say "FAILED: the token is not mode 0600"; exit 1; }
say "ok: the head started and created its token (0600)"

# LoadCredential: systemd copies the file into the service's credentials directory.
mkdir -p -m 0700 "$work/creds-libtune-node"
cp "$token" "$work/creds-libtune-node/token"; chmod 0400 "$work/creds-libtune-node/token"
run_line libtune-node "$(directive libtune-node ExecStart)" > "$work/node.log" 2>&1 &
node_pid=$!; pids+=($node_pid)
joined=0
for _ in $(seq 1 100); do
  if "$tune" status --address "127.0.0.1:$port" --token-file "$token" --json 2>/dev/null | grep -q '"alive_nodes":1'; then
    joined=1; break
  fi
  sleep 0.1
done
[ $joined = 1 ] || { say "FAILED: the node did not join"; cat "$work/node.log" "$work/head.log"; exit 1; }
"$tune" status --address "127.0.0.1:$port" --token-file "$token" | grep -q "dashboard: http://127.0.0.1:" ||
  { say "FAILED: the head serves no dashboard"; exit 1; }
say "ok: the node read the token from its credentials and joined; the head serves its dashboard"
if [ -n "$delegated" ]; then
  for _ in $(seq 1 50); do grep -q "containment: cgroup v2 (delegated" "$work/node.log" && break; sleep 0.1; done
  grep -q "containment: cgroup v2 (delegated" "$work/node.log" ||
    { say "FAILED: the node did not take its delegated cgroup"; cat "$work/node.log"; exit 1; }
  [ -d "$delegated/node" ] && [ -d "$delegated/trials" ] && grep -qx "$node_pid" "$delegated/node/cgroup.procs" ||
    { say "FAILED: the node is not in $delegated/node, or made no trials/ beside it"; ls -R "$delegated"; exit 1; }
  [ -z "$(cat "$delegated/cgroup.procs")" ] || { say "FAILED: processes left in the unit's own cgroup"; exit 1; }
  # A trial in it: its cgroup under trials/, gone with the trial.
  cat > "$work/escape.yaml" <<EOF2
command: [/bin/sh, -c, "setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo \$! > $work/sleeper' ; sleep 0.3; echo 'loss=1'"]
metric_pattern: 'loss=(?P<loss>[0-9.]+)'
metric: loss
mode: min
num_samples: 1
EOF2
: > "$work/sleeper" && chmod 666 "$work/sleeper"  # the trial (nobody) writes its sleeper's pid
  # From its own folder: the working directory (the current one) is shipped to the node.
  (cd "$work" && "$tune" run "$work/escape.yaml" --address "127.0.0.1:$port" --token-file "$token" --experiment-dir "$work/exp") \
    > "$work/run.log" 2>&1 || { say "FAILED: tune run under the delegated node"; cat "$work/run.log"; exit 1; }
  sleeper=$(cat "$work/sleeper")
  for _ in $(seq 1 50); do kill -0 "$sleeper" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$sleeper" 2>/dev/null; then say "FAILED: the trial's setsid sleeper $sleeper outlived it"; exit 1; fi
  [ -z "$(find "$delegated/trials" -mindepth 1 -type d)" ] || { say "FAILED: a trial's cgroup was left in $delegated/trials"; exit 1; }
  say "ok: under Delegate=yes the node moved into node/, its trial ran in trials/ and its setsid sleeper died with it"
else
  say "note: not root or no cgroup2: Delegate=yes not exercised"
fi

# systemctl stop: SIGTERM to the main process (KillMode=mixed), node first.
for pid in $node_pid $head_pid; do
  kill -TERM "$pid"
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then say "FAILED: pid $pid did not stop within 20 s of SIGTERM"; exit 1; fi
  wait "$pid" && rc=0 || rc=$?
  [ $rc = 0 ] || { say "FAILED: pid $pid exited with $rc after SIGTERM"; cat "$work/node.log" "$work/head.log"; exit 1; }
done
grep -q "leaving the cluster" "$work/node.log" || { say "FAILED: the node did not leave the cluster"; exit 1; }
grep -q "node .* left" "$work/head.log" || { say "FAILED: the head did not see the node leave"; cat "$work/head.log"; exit 1; }
say "ok: SIGTERM stopped the node (it left the cluster) and the head, both with exit code 0"
say "passed"
