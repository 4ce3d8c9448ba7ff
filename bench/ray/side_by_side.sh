#!/usr/bin/env bash
# side_by_side.sh: libtune's bench_overhead and Ray Tune (ray_overhead.py) on the same
# workload and machine, alternately, inside a network namespace where only loopback is
# up (all traffic stays on 127.0.0.1). Ray is installed, pinned, in a virtual environment
# of its own (a benchmark tool, never a dependency of libtune). Root only: it creates
# the namespace. See bench/ray/README.md.
#
#   bench/ray/side_by_side.sh [--build DIR] [--trials 2000] [--reports 10] [--sleep-ms 50]
#                             [--repeats 3] [--out FILE] [--logs DIR] [--reuse-actors both]
#                             [--venv DIR] [--ray-version 2.60.0] [--python /usr/bin/python3]
#                             [--run-timeout 5400]
#
# Each repeat runs libtune's bench_overhead (--repeats 1, the same N/R/S, 4 nodes x 16
# logical GPUs) and then ray_overhead.py with reuse_actors=False (Tune's default) and,
# with --reuse-actors both (default), again with reuse_actors=True. The last line of
# stdout is one JSON object: each system's median wall_over_ideal and wall_s, every run,
# and the ratios ray/libtune; --out FILE also writes it to FILE. Exit 1 if a run failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
trials=2000 reports=10 sleep_ms=50 repeats=3 out="" logs="" reuse=both
venv=/opt/libtune-bench/ray-venv ray_version=2.60.0 python=/usr/bin/python3 run_timeout=5400

die() { echo "side_by_side: $*" >&2; exit 2; }
usage() { sed -n '8,11p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --trials) trials=${2:?}; shift 2 ;;
    --reports) reports=${2:?}; shift 2 ;;
    --sleep-ms) sleep_ms=${2:?}; shift 2 ;;
    --repeats) repeats=${2:?}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --logs) logs=${2:?--logs needs a folder}; shift 2 ;;
    --reuse-actors) reuse=${2:?}; shift 2 ;;
    --venv) venv=${2:?}; shift 2 ;;
    --ray-version) ray_version=${2:?}; shift 2 ;;
    --python) python=${2:?}; shift 2 ;;
    --run-timeout) run_timeout=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
for v in trials reports repeats run_timeout; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-} must be a whole number of at least 1 (got '${!v}')"
done
[[ $sleep_ms =~ ^[0-9]+$ ]] || die "--sleep-ms must be a whole number (got '$sleep_ms')"
case $reuse in false|true|both) ;; *) die "--reuse-actors is false, true or both (got '$reuse')" ;; esac

# --- what it needs -------------------------------------------------------------------
[ "$EUID" -eq 0 ] || die "must run as root: it creates a network namespace (ip netns add); try: sudo $0 $*"
command -v ip > /dev/null || die "no 'ip' command: apt-get install iproute2"
command -v ss > /dev/null || die "no 'ss' command: apt-get install iproute2"
bench=$build/bench/bench_overhead
[ -x "$bench" ] || die "no $bench: build it first (cmake --build $build --target bench_overhead) or pass --build DIR"
[ -x "$python" ] || die "no Python at $python (--python)"

# --- Ray, in its own virtual environment, pinned ---------------------------------------
ray_installed() { "$venv/bin/python" -c 'import ray, ray.tune; print(ray.__version__)' 2> /dev/null; }
if [ "$(ray_installed)" != "$ray_version" ]; then
  echo "== installing ray[tune]==$ray_version in $venv" >&2
  if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
    "$python" -m venv "$venv" || die "'$python -m venv $venv' failed (Debian: apt-get install python3-venv)"
  fi
  "$venv/bin/python" -m pip install --quiet "ray[tune]==$ray_version" ||
    die "pip install \"ray[tune]==$ray_version\" into $venv failed (is PyPI reachable? see pip's message above)"
  [ "$(ray_installed)" = "$ray_version" ] || die "ray $ray_version does not import from $venv after the install"
fi
py_version=$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')
echo "== ray $ray_version, Python $py_version, venv $venv" >&2

# --- scratch folder and namespace, both removed however this ends ----------------------
scratch=$(mktemp -d /tmp/lt-sbs.XXXXXX) || die "mktemp failed"
ns=lt-bench-$$
sampler=""
end_pids() {  # SIGTERM to the namespace's processes (Ray's driver then stops Ray), SIGKILL after 15 s
  kill -TERM $1 2> /dev/null
  for _ in $(seq 30); do [ -z "$(ip netns pids "$ns" 2> /dev/null)" ] && return 0; sleep 0.5; done
  # shellcheck disable=SC2046  # one word per process id
  kill -KILL $(ip netns pids "$ns" 2> /dev/null) 2> /dev/null
  sleep 0.5
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  [ -n "$sampler" ] && kill "$sampler" 2> /dev/null
  if ip netns list 2> /dev/null | grep -qw "$ns"; then
    local pids; pids=$(ip netns pids "$ns" 2> /dev/null)
    [ -n "$pids" ] && end_pids "$pids"
    ip netns del "$ns" 2> /dev/null || echo "side_by_side: could not remove namespace $ns" >&2
  fi
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
ip netns add "$ns" || die "ip netns add $ns failed"
ip -n "$ns" link set lo up || die "cannot set lo up in $ns"
links=$(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')
echo "== namespace $ns: links: $links; addresses: $(ip -n "$ns" -o addr show | awk '{print $4}' | tr '\n' ' ')" >&2

# `ip netns exec` gives the command a mount namespace with a fresh /sys, in which the
# host's cgroup file systems are missing (libtune's nodes would fall back from cgroups to
# the subreaper): mount them again there, as the host has them, so that libtune runs with
# the containment it has outside the namespace.
grep ' /sys/fs/cgroup' /proc/self/mounts > "$scratch/cgroup-mounts"
in_ns() {
  ip netns exec "$ns" sh -c '
    while read -r src mnt type opts _; do
      mkdir -p "$mnt" 2> /dev/null; mount -t "$type" -o "$opts" "$src" "$mnt" 2> /dev/null ||
        echo "side_by_side: could not mount $type at $mnt in the namespace" >&2
    done < "$0"
    exec "$@"' "$scratch/cgroup-mounts" "$@"
}

# Every 5 s while a run goes on: what listens in the namespace ($1.listen) and the
# machine's available memory in MiB ($1.mem).
sample_run() {
  local s=""
  trap '[ -n "$s" ] && kill "$s" 2> /dev/null; exit 0' TERM
  while :; do
    ip netns exec "$ns" ss -H -ltnu 2> /dev/null | awk '{print $5}' >> "$1.listen"
    awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo >> "$1.mem"
    sleep 5 & s=$!; wait "$s"
  done
}

# How busy the machine's CPUs are over 2 s, in percent (all of them, from /proc/stat):
# checked before each run, since a run on a busy machine measures the other load too.
busy_pct() {
  local a b
  read -ra a < /proc/stat; sleep 2; read -ra b < /proc/stat
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  local idle=$(( b[4] - a[4] + b[5] - a[5] ))
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}

# After a run nothing of it may be left in the namespace: report it, then end it.
leftovers=""
check_leftovers() {
  local what=$1 pids
  sleep 1
  pids=$(ip netns pids "$ns" 2> /dev/null)
  [ -z "$pids" ] && return 0
  local names; names=$(ps -o comm= -p "$(echo $pids | tr ' ' ',')" 2> /dev/null | sort | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s=", "}')
  echo "side_by_side: after $what, left running in the namespace: $names: ending them" >&2
  leftovers="$leftovers${leftovers:+; }$what: $names"
  end_pids "$pids"
  return 0
}

failed=0
run_one() {  # run_one NAME LOG -- COMMAND...: its last JSON line of stdout into $scratch/NAME.json
  local name=$1 log=$2; shift 3
  local busy; busy=$(busy_pct)
  [ "$busy" -gt 15 ] && echo "side_by_side: the machine is ${busy}% busy before $name: its figures include that load" >&2
  : > "$scratch/$name.listen"; : > "$scratch/$name.mem"
  sample_run "$scratch/$name" & sampler=$!
  local t0=$SECONDS
  # In the background, waited for: a signal to this script is handled at once (the trap
  # then ends everything in the namespace), not after the run.
  in_ns env RAY_USAGE_STATS_ENABLED=0 timeout -k 30 "$run_timeout" "$@" > "$scratch/$name.out" 2> "$log" &
  wait $!
  local rc=$?
  kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null; sampler=""
  check_leftovers "$name"
  grep '^{' "$scratch/$name.out" | tail -n 1 > "$scratch/$name.json"  # its last JSON line
  if [ $rc -ne 0 ] || ! "$python" -c 'import json,sys; json.load(open(sys.argv[1]))["wall_s"]' "$scratch/$name.json" 2> /dev/null; then
    echo "side_by_side: $name failed (exit $rc$([ $rc -eq 124 ] && echo ": over --run-timeout $run_timeout s")); the end of its log:" >&2
    tail -n 15 "$log" | sed 's/^/  /' >&2
    echo '{"failed": true, "exit": '"$rc"'}' > "$scratch/$name.json"
    failed=1
  fi
  local mem; mem=$(sort -n "$scratch/$name.mem" | head -n 1)
  echo "{\"busy_before_pct\": $busy, \"min_mem_available_mib\": ${mem:-null}}" > "$scratch/$name.meta"
  echo "   $name: $(( SECONDS - t0 )) s, $(cut -c1-160 "$scratch/$name.json")" >&2
}

kinds=(libtune)
case $reuse in false) kinds+=(ray) ;; true) kinds+=(ray_reuse) ;; both) kinds+=(ray ray_reuse) ;; esac
echo "== $trials trials x $reports reports x $sleep_ms ms on 64 slots, $repeats repeat(s), alternately: ${kinds[*]}" >&2
logdir=$scratch/logs; mkdir -p "$logdir"
for k in $(seq 1 "$repeats"); do
  for kind in "${kinds[@]}"; do
    case $kind in
      libtune) run_one "$kind-$k" "$logdir/$kind-$k.log" -- "$bench" --trials "$trials" --reports "$reports" \
                 --sleep-ms "$sleep_ms" --nodes 4 --gpus-per-node 16 --repeats 1 ;;
      ray) run_one "$kind-$k" "$logdir/$kind-$k.log" -- "$venv/bin/python" "$here/ray_overhead.py" --trials "$trials" \
             --reports "$reports" --sleep-ms "$sleep_ms" --slots 64 --reuse-actors false --tmp-root "$scratch" ;;
      ray_reuse) run_one "$kind-$k" "$logdir/$kind-$k.log" -- "$venv/bin/python" "$here/ray_overhead.py" --trials "$trials" \
                   --reports "$reports" --sleep-ms "$sleep_ms" --slots 64 --reuse-actors true --tmp-root "$scratch" ;;
    esac
  done
done
# Ray's daemons anywhere on the machine (not only in the namespace, where each run was
# checked): none should be left of these runs.
stray=$( { pgrep -x raylet; pgrep -x gcs_server; } 2> /dev/null | tr '\n' ' ')
if [ -n "$stray" ]; then
  echo "side_by_side: raylet/gcs_server processes running on this machine: $stray (not in this script's namespace)" >&2
  leftovers="$leftovers${leftovers:+; }outside the namespace: raylet/gcs_server $stray"
fi
cat "$scratch"/*.listen 2> /dev/null | sed 's/:[0-9*]*$//' | sort -u > "$scratch/listen-all"
if [ -n "$logs" ]; then mkdir -p "$logs" && cp "$logdir"/*.log "$scratch"/*.out "$scratch"/*.json "$scratch"/*.meta "$logs"/ && echo "== logs in $logs" >&2; fi

# --- the table and the JSON ------------------------------------------------------------
"$python" - "$scratch" "$trials" "$reports" "$sleep_ms" "$repeats" "$ray_version" "$py_version" "$out" \
  "$leftovers" "${kinds[@]}" <<'EOF'
import json, os, statistics, sys
scratch, trials, reports, sleep_ms, repeats, ray_version, py_version, out, leftovers = sys.argv[1:10]
kinds = sys.argv[10:]
trials, reports, sleep_ms, repeats = int(trials), int(reports), int(sleep_ms), int(repeats)
ideal = trials * reports * sleep_ms / 1000.0 / 64
label = {"libtune": "libtune bench_overhead", "ray": "Ray Tune, reuse_actors=False",
         "ray_reuse": "Ray Tune, reuse_actors=True"}
key = {"libtune": "libtune", "ray": "ray_tune", "ray_reuse": "ray_tune_reuse_actors"}
listen = [l.strip() for l in open(os.path.join(scratch, "listen-all")) if l.strip()]
summary = {"trials": trials, "reports": reports, "sleep_ms": sleep_ms, "slots": 64, "ideal_s": ideal,
           "repeats": repeats, "cpus": os.cpu_count(), "ray_version": ray_version, "ray_python": py_version,
           "network": "namespace with loopback only", "listening_on": listen,
           "leftovers": leftovers or None}
rows = []
for kind in kinds:
    runs = []
    for k in range(1, repeats + 1):
        try:
            runs.append(json.load(open(os.path.join(scratch, f"{kind}-{k}.json"))))
        except (OSError, ValueError):
            runs.append({"failed": True})
        r = runs[-1]
        if kind == "libtune" and r.get("runs") and isinstance(r["runs"][0].get("cpu_ms_per_trial"), dict):
            # bench_overhead's CPU per trial, by process (controller, driver, head, nodes,
            # trials): their sum, to set beside Ray's (the machine's, over fit())
            r["cpu_ms_per_trial"] = round(sum(r["runs"][0]["cpu_ms_per_trial"].values()), 3)
        try:
            r.update(json.load(open(os.path.join(scratch, f"{kind}-{k}.meta"))))
        except (OSError, ValueError):
            pass
    ok = [r for r in runs if not r.get("failed")]
    part = {"runs": [{f: r.get(f) for f in ("wall_s", "wall_over_ideal", "cpu_ms_per_trial", "trial_processes",
                                            "peak_concurrent_trials", "busy_before_pct",
                                            "min_mem_available_mib", "failed") if f in r}
                     for r in runs]}
    if ok:
        part["wall_over_ideal"] = statistics.median(r["wall_over_ideal"] for r in ok)
        part["wall_s"] = statistics.median(r["wall_s"] for r in ok)
    if ok and all("cpu_ms_per_trial" in r for r in ok):
        part["cpu_ms_per_trial"] = statistics.median(r["cpu_ms_per_trial"] for r in ok)
    if kind != "libtune":
        part["reuse_actors"] = kind == "ray_reuse"
    summary[key[kind]] = part
    rows.append((label[kind], len(ok), part.get("wall_s"), part.get("wall_over_ideal"),
                 " ".join(f"{r['wall_over_ideal']:.3f}" if not r.get("failed") else "failed" for r in runs)))
lt = summary["libtune"].get("wall_over_ideal")
for kind in kinds[1:]:
    r = summary[key[kind]].get("wall_over_ideal")
    summary["ratio_" + key[kind] + "_over_libtune"] = round(r / lt, 2) if r and lt else None
print(f"\n{trials} trials x {reports} reports x {sleep_ms} ms, 64 slots, ideal {ideal:.2f} s, "
      f"{os.cpu_count()} CPUs; medians of {repeats}", file=sys.stderr)
print(f"{'system':32} {'runs':>4} {'wall_s':>9} {'wall/ideal':>10}  each run's wall/ideal", file=sys.stderr)
for name, n, w, r, each in rows:
    ws = f"{w:9.2f}" if w is not None else f"{'-':>9}"
    rs = f"{r:10.3f}" if r is not None else f"{'-':>10}"
    print(f"{name:32} {n:>4} {ws} {rs}  {each}", file=sys.stderr)
for kind in kinds[1:]:
    v = summary["ratio_" + key[kind] + "_over_libtune"]
    print(f"{label[kind]} / libtune (wall/ideal): {v if v is not None else '-'}", file=sys.stderr)
print(f"listening in the namespace: {' '.join(listen) or 'nothing seen'}", file=sys.stderr)
line = json.dumps(summary)
print(line)
if out:
    with open(out, "w") as f:
        f.write(line + "\n")
EOF
[ $? -eq 0 ] || failed=1
exit $failed
