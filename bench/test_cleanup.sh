#!/bin/bash
# Every benchmark stops what it started and removes its folder, however it ends
# (bench/procs.hpp: at exit, and a reaper process when the benchmark is killed):
# bench_failover run to its end, killed with SIGKILL and with SIGTERM, bench_pg killed
# with SIGKILL mid-run. Afterwards no process of the benchmark's cluster is left (its
# daemons' pid files, and any process whose command line or environment names the
# benchmark's folder) and the folder is gone.
#
# usage: test_cleanup.sh BENCH_FAILOVER BENCH_PG
set -u
failover=$1
pg=$2
work=$(mktemp -d /tmp/bench-cleanup-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}

# The processes that belong to the cluster in folder $1: its pid files' processes, and
# any process whose command line or environment names the folder.
processes_of() {
  local dir=$1 pids=""
  for f in "$dir"/*.pid "$dir"/*/*.pid; do
    [ -f "$f" ] && pids="$pids $(cat "$f" 2>/dev/null)"
  done
  for p in /proc/[0-9]*; do
    if grep -qsF "$dir" "$p/cmdline" "$p/environ" 2>/dev/null; then pids="$pids ${p#/proc/}"; fi
  done
  echo $pids
}

# Waits up to 30 s for folder $1 to be gone and the processes $2.. to have ended.
expect_clean() {
  local dir=$1 what=$2
  shift 2
  for _ in $(seq 300); do
    local alive=""
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
    if [ ! -e "$dir" ] && [ -z "$alive" ]; then
      echo "ok: $what: $dir removed, $# process(es) of its cluster ended"
      return 0
    fi
    sleep 0.1
  done
  echo "still running:"
  for p in $alive; do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null; echo; done
  fail "$what: after 30 s, $( [ -e "$dir" ] && echo "$dir is still there; ")processes$alive still run"
}

# Starts benchmark $2 (named $1, its folders /tmp/$1-*) with arguments $4.., waits until
# its cluster runs (a head and a node pid file in its new folder), sends it signal $3,
# and checks that nothing of it is left.
killed() {
  local name=$1 bench=$2 signal=$3
  shift 3
  local before
  before=$(ls -d /tmp/"$name"-* 2>/dev/null)
  "$bench" "$@" >"$work/$name-$signal.log" 2>&1 &
  local bp=$! dir=""
  for _ in $(seq 600); do
    for d in /tmp/"$name"-*; do
      [ -d "$d" ] || continue
      grep -qxF "$d" <<<"$before" && continue
      dir=$d
    done
    if [ -n "$dir" ] && [ "$(ls "$dir"/*.pid 2>/dev/null | wc -l)" -ge 2 ]; then break; fi
    kill -0 "$bp" 2>/dev/null || { cat "$work/$name-$signal.log"; fail "$name ended before its cluster ran"; }
    sleep 0.1
  done
  [ -n "$dir" ] || fail "$name made no folder in /tmp"
  sleep 1  # its trials under way
  local pids
  pids=$(processes_of "$dir")
  kill -"$signal" "$bp"
  wait "$bp" 2>/dev/null
  # shellcheck disable=SC2086
  expect_clean "$dir" "$name killed with SIG$signal" $pids
}

# To its end.
before=$(ls -d /tmp/bench_failover-* 2>/dev/null)
"$failover" --repeats 1 --checkpoint-mb 1 >"$work/end.out" 2>"$work/end.err" || { cat "$work/end.err"; fail "bench_failover failed"; }
grep -q recover_s_p50 "$work/end.out" || fail "bench_failover printed no result: $(cat "$work/end.out")"
after=$(ls -d /tmp/bench_failover-* 2>/dev/null)
[ "$before" = "$after" ] || fail "bench_failover left a folder behind: $(comm -13 <(echo "$before") <(echo "$after"))"
# (the reaper, which finds nothing to do, may take a moment to end)
left=""
for _ in $(seq 50); do
  left=$(for p in /proc/[0-9]*; do grep -qsF /tmp/bench_failover- "$p/cmdline" "$p/environ" 2>/dev/null && echo "${p#/proc/}"; done)
  [ -z "$left" ] && break
  sleep 0.1
done
for p in $left; do
  kill -0 "$p" 2>/dev/null && fail "bench_failover left process $p running: $(tr '\0' ' ' < /proc/$p/cmdline)"
done
echo "ok: bench_failover to its end left nothing"

killed bench_failover "$failover" KILL --repeats 1 --checkpoint-mb 1
killed bench_failover "$failover" TERM --repeats 1 --checkpoint-mb 1
killed bench_pg "$pg" KILL --quick
echo "all benchmarks cleaned up after themselves"
