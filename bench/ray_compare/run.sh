#!/usr/bin/env bash
# run.sh: bench_tune.py (200 trials x 10 reports x 50 ms, 16 at once; ideal 6.5 s) in
# Ray Tune and in libtune, alternately, on this machine. The two runs use the same
# script but for its two import lines (marked BENCH-IMPORT). See README.md here.
#
#   bench/ray_compare/run.sh [--repeat N] [--only ray|libtune] [--out FILE]
#                            [--logs DIR] [--run-timeout SEC] [--delete-netns]
#                            [--quiet-wait SEC] [--quiet-pct P] [--search optuna]
#
# --search optuna: both run OptunaSearch(sampler=optuna.samplers.TPESampler(seed=0))
# (BENCH_SEARCH=optuna; Optuna installed in the Ray venv and beside LIBTUNE_PYTHON).
#
# Ray: Ray Tune from the virtual environment $RAY_VENV (/var/tmp/libtune-bench-ray,
# made with `python3 -m venv` + `pip install "ray[tune]==2.60.*" pandas`), run inside
# the network namespace $RAY_NETNS (raybench; created if missing, only `lo` up), with
# HOME, RAY_TMPDIR and the storage path in a fresh folder under /var/tmp.
# libtune: $LIBTUNE_PYTHON (default /usr/bin/python3 with PYTHONPATH=<repo>/python and
# LIBTUNE_TUNE=<repo>/build/nodes/tune unless those are set), outside the namespace.
# Every run's JSON line (plus what the harness adds) is appended to --out (default
# bench/results/<UTC date>-ray-compare.jsonl); at the end it prints each system's medians
# and the ratios ray/libtune of overhead_s and first_report_s. Before each run it waits
# (up to --quiet-wait, 600 s) for the machine to be under --quiet-pct (15) % busy, and
# during each run foreign_cpu.py counts the CPU that build and test tools took meanwhile
# (other people's work on the same 2 cores). Root only for the Ray side (ip netns).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
repeat=5 only="" out="" logs="" run_timeout=1800 delete_netns=0 quiet_wait=600 quiet_pct=15
ray_venv=${RAY_VENV:-/var/tmp/libtune-bench-ray}
ns=${RAY_NETNS:-raybench}

die() { echo "run.sh: $*" >&2; exit 2; }
usage() { sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) repeat=${2:?--repeat needs a number}; shift 2 ;;
    --only) only=${2:?--only needs ray or libtune}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --logs) logs=${2:?--logs needs a folder}; shift 2 ;;
    --run-timeout) run_timeout=${2:?}; shift 2 ;;
    --delete-netns) delete_netns=1; shift ;;
    --quiet-wait) quiet_wait=${2:?}; shift 2 ;;
    --quiet-pct) quiet_pct=${2:?}; shift 2 ;;
    --search) [ "${2:-}" = optuna ] || die "--search takes optuna"; export BENCH_SEARCH=optuna; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a whole number of at least 1 (got '$repeat')"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || die "--run-timeout must be a whole number of seconds (got '$run_timeout')"
[[ $quiet_wait =~ ^[0-9]+$ ]] || die "--quiet-wait must be a whole number of seconds (got '$quiet_wait')"
[[ $quiet_pct =~ ^[0-9]+$ ]] || die "--quiet-pct must be a whole number (got '$quiet_pct')"
case $only in ""|ray|libtune) ;; *) die "--only is ray or libtune (got '$only')" ;; esac
systems=(ray libtune)
[ -n "$only" ] && systems=("$only")

stamp=$(date -u +%Y%m%dT%H%M%SZ)
[ -n "$out" ] || out=$root/bench/results/$(date -u +%F)-ray-compare.jsonl
[ -n "$logs" ] || logs=/var/tmp/ray-compare-logs.$stamp
mkdir -p "$logs" "$(dirname "$out")" || die "cannot create $logs or $(dirname "$out")"
summary_py=/usr/bin/python3
[ -x "$summary_py" ] || summary_py=$(command -v python3) || die "no python3 for the summary"

# --- the two variants of the one script ----------------------------------------------
src=$here/bench_tune.py
[ "$(grep -c '# BENCH-IMPORT$' "$src")" -eq 2 ] || die "$src must have exactly two lines marked # BENCH-IMPORT"
work=$(mktemp -d /var/tmp/ray-compare-work.XXXXXX) || die "mktemp failed"
cp "$src" "$work/bench_tune_ray.py"
sed -e 's/^import ray  # BENCH-IMPORT$/import libtune as ray  # BENCH-IMPORT/' \
    -e 's/^from ray import tune  # BENCH-IMPORT$/from libtune import tune  # BENCH-IMPORT/' \
    "$src" > "$work/bench_tune_libtune.py"
ndiff=$(diff "$work/bench_tune_ray.py" "$work/bench_tune_libtune.py" | grep -c '^[<>]')
[ "$ndiff" -eq 4 ] || die "the libtune variant should differ in exactly the 2 import lines (diff has $ndiff lines)"

# --- what each side needs ----------------------------------------------------------------
if [[ " ${systems[*]} " == *" ray "* ]]; then
  [ "$EUID" -eq 0 ] || die "must run as root for the Ray side (ip netns); or use --only libtune"
  command -v ip > /dev/null || die "no 'ip' command: apt-get install iproute2"
  ray_py=$ray_venv/bin/python
  ray_version=$("$ray_py" -c 'import ray, ray.tune, pandas; print(ray.__version__)' 2> /dev/null) ||
    die "no Ray Tune in $ray_venv: /usr/bin/python3 -m venv $ray_venv && $ray_venv/bin/pip install \"ray[tune]==2.60.*\" pandas"
  if ! ip netns list | grep -qw "^$ns"; then
    ip netns add "$ns" || die "ip netns add $ns failed"
    echo "== created network namespace $ns" >&2
  fi
  ip -n "$ns" link set lo up || die "cannot set lo up in $ns"
  echo "== Ray $ray_version ($ray_py), namespace $ns: links $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')" >&2
fi
if [[ " ${systems[*]} " == *" libtune "* ]]; then
  if [ -n "${LIBTUNE_PYTHON:-}" ]; then
    lt_env=()
  else
    LIBTUNE_PYTHON=/usr/bin/python3
    lt_env=("PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}")
  fi
  # (a LIBTUNE_TUNE already set is inherited as it is)
  [ -n "${LIBTUNE_TUNE:-}" ] || [ ! -x "$root/build/nodes/tune" ] || lt_env+=("LIBTUNE_TUNE=$root/build/nodes/tune")
  lt_check=$(env "${lt_env[@]}" "$LIBTUNE_PYTHON" -c 'from libtune import tune; tune.Tuner, tune.TuneConfig, tune.RunConfig, tune.with_resources; import libtune; libtune.init' 2>&1 | tail -1)
  if [ -n "$lt_check" ]; then
    echo "run.sh: libtune's Tune API is not usable yet with $LIBTUNE_PYTHON (${lt_env[*]}): $lt_check" >&2
    echo "run.sh: the libtune runs will be recorded as failed" >&2
  fi
fi

# --- ending what a run left --------------------------------------------------------------
running="" sampler=""
ns_pids() { ip netns pids "$ns" 2> /dev/null | tr '\n' ' '; }
end_ns_pids() {  # every process still in the namespace: SIGTERM, then SIGKILL after 15 s
  local pids; pids=$(ns_pids)
  [ -z "$pids" ] && return 0
  echo "run.sh: ending processes left in $ns: $pids" >&2
  # shellcheck disable=SC2086  # one word per process id
  kill -TERM $pids 2> /dev/null
  for _ in $(seq 30); do [ -z "$(ns_pids)" ] && return 1; sleep 0.5; done
  # shellcheck disable=SC2046
  kill -KILL $(ns_pids) 2> /dev/null
  sleep 0.5
  return 1
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  [ -n "$running" ] && kill -TERM -- "-$running" 2> /dev/null
  [ -n "$sampler" ] && kill -TERM "$sampler" 2> /dev/null
  if ip netns list 2> /dev/null | grep -qw "^$ns"; then
    end_ns_pids
    [ "$delete_netns" = 1 ] && { ip netns del "$ns" || echo "run.sh: could not remove namespace $ns" >&2; }
  fi
  rm -rf "$work" /var/tmp/ray-compare-run.*."$$" /var/tmp/ray-compare-run.*."$$".foreign
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

busy_pct() {  # the machine's CPU use over 2 s, in percent
  local a b
  read -ra a < /proc/stat; sleep 2; read -ra b < /proc/stat
  local tot=0 idle i
  for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $(( tot > 0 ? 100 * (tot - idle) / tot : 0 ))
}

commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain 2> /dev/null | grep -c . )
lines=$work/lines.jsonl
: > "$lines"
t_all=$(date +%s)

run_one() {  # system, repeat number
  local sys=$1 k=$2 d rc t1 t2 busy leftovers="" json waited=0
  d=$(mktemp -d "/var/tmp/ray-compare-run.XXXXXX.$$") || die "mktemp failed"
  busy=$(busy_pct)
  while [ "$busy" -gt "$quiet_pct" ] && [ "$waited" -lt "$quiet_wait" ]; do
    [ "$waited" -eq 0 ] && echo "== the machine is ${busy}% busy: waiting up to ${quiet_wait} s for it to be under ${quiet_pct}%" >&2
    sleep 8; waited=$((waited + 10)); busy=$(busy_pct)
  done
  [ "$busy" -gt "$quiet_pct" ] && echo "run.sh: warning: the machine is ${busy}% busy before $sys run $k" >&2
  "$summary_py" "$here/foreign_cpu.py" "$d.foreign" 2 &
  sampler=$!
  t1=$(date +%s.%N)
  if [ "$sys" = ray ]; then
    setsid timeout -k 20 "$run_timeout" ip netns exec "$ns" env -u RAY_ADDRESS HOME="$d" RAY_TMPDIR="$d" \
      RAY_USAGE_STATS_ENABLED=0 "$ray_py" "$work/bench_tune_ray.py" "$d/results" \
      > "$logs/$sys-$k.out" 2> "$logs/$sys-$k.err" &
  else
    setsid timeout -k 20 "$run_timeout" env -C "$d" "${lt_env[@]}" "$LIBTUNE_PYTHON" "$work/bench_tune_libtune.py" \
      "$d/results" > "$logs/$sys-$k.out" 2> "$logs/$sys-$k.err" &
  fi
  running=$!
  wait "$running"; rc=$?
  running=""
  t2=$(date +%s.%N)
  kill -TERM "$sampler" 2> /dev/null; wait "$sampler"; sampler=""
  if [ "$sys" = ray ]; then
    end_ns_pids || leftovers="processes were left in $ns (ended)"
    # raylets or GCS servers of this run outside the namespace would be a bug of the harness
    stray=$( { pgrep -x raylet; pgrep -x gcs_server; } 2> /dev/null | tr '\n' ' ')
    [ -n "$stray" ] && leftovers="$leftovers${leftovers:+; }raylet/gcs_server on the machine: $stray"
  fi
  foreign=$(cat "$d.foreign" 2> /dev/null)
  rm -rf "$d" "$d.foreign"
  json=$(grep '^{' "$logs/$sys-$k.out" | tail -1)
  "$summary_py" - "$sys" "$k" "$rc" "$t1" "$t2" "$busy" "$leftovers" "$stamp" "$commit" "$dirty" \
    "${ray_version:-}" "$json" "$logs/$sys-$k.err" "$waited" "$foreign" >> "$lines" <<'EOF'
import json, sys
sys_, k, rc, t1, t2, busy, left, stamp, commit, dirty, ray_version, line, err, waited, foreign = sys.argv[1:]
try:
    r = json.loads(line) if line else {}
except ValueError:
    r = {}
warn = 0
try:
    warn = sum(1 for l in open(err, errors="replace") if "WARNING" in l or "Warning" in l)
except OSError:
    pass
r.setdefault("system", sys_)
r.update({"bench": "ray-compare", "session": stamp, "run": int(k), "rc": int(rc),
          "ok": int(rc) == 0 and bool(line) and r.get("trials") == 200 and r.get("errors") == 0,
          "process_s": round(float(t2) - float(t1), 2), "busy_before_pct": int(busy),
          "stderr_warnings": warn, "commit": commit, "dirty_files": int(dirty),
          "netns": sys_ == "ray", "leftovers": left or None, "quiet_waited_s": int(waited)})
try:
    r.update(json.loads(foreign))
except ValueError:
    r["foreign_cpu_s"] = None
if sys_ == "ray":
    r["ray_version"] = ray_version
if not line:
    try:
        tail = [l.rstrip() for l in open(err, errors="replace") if l.strip()][-3:]
    except OSError:
        tail = []
    r["error_tail"] = tail
print(json.dumps(r))
EOF
  tail -1 "$lines" >> "$out"
  "$summary_py" -c 'import json,sys; r=json.loads(sys.argv[1]); print("== %s run %s: rc %s, wall_s %s, overhead_s %s, first_report_s %s, trials %s, errors %s, peak %s, busy %s, foreign CPU %s s (%.0f s in all)" % (r["system"], r["run"], r["rc"], r.get("wall_s"), r.get("overhead_s"), r.get("first_report_s"), r.get("trials"), r.get("errors"), r.get("peak_concurrent"), r.get("busy_frac"), r.get("foreign_cpu_s"), r["process_s"]))' "$(tail -1 "$lines")" >&2
}

echo "== $repeat x (${systems[*]}), logs in $logs, lines to $out" >&2
for k in $(seq "$repeat"); do
  for sys in "${systems[@]}"; do
    run_one "$sys" "$k"
  done
done

# --- medians (also appended to --out, as a line with "summary": true) ----------------------
("$summary_py" - "$lines" "$(( $(date +%s) - t_all ))" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\n200 trials x 10 reports x 50 ms, 16 at once, ideal 6.5 s; {sys.argv[2]} s in all", file=sys.stderr)
med = {}
for system in ("ray", "libtune"):
    mine = [r for r in rows if r["system"] == system]
    if not mine:
        continue
    ok = [r for r in mine if r["ok"]]
    m = {f: statistics.median(r[f] for r in ok) for f in ("wall_s", "overhead_s", "first_report_s", "import_s", "init_s")
         if ok and all(r.get(f) is not None for r in ok)}
    med[system] = m
    each = " ".join(f"{r['overhead_s']:.2f}/{r['first_report_s']:.2f}/{r.get('foreign_cpu_s')}" if r["ok"] else "failed"
                    for r in mine)
    print(f"{system:8} runs ok {len(ok)}/{len(mine)}  median wall_s {m.get('wall_s', '-')}  overhead_s "
          f"{m.get('overhead_s', '-')}  first_report_s {m.get('first_report_s', '-')}\n         each run's overhead_s/first_report_s/foreign CPU s: {each}",
          file=sys.stderr)
summary = {"bench": "ray-compare", "summary": True, "medians": med}
ray, lt = med.get("ray", {}), med.get("libtune", {})
for f in ("overhead_s", "first_report_s"):
    if ray.get(f) is not None and lt.get(f):
        summary[f"ratio_{f}_ray_over_libtune"] = round(ray[f] / lt[f], 2)
        print(f"{f} ray / libtune: {summary[f'ratio_{f}_ray_over_libtune']}", file=sys.stderr)
print(json.dumps(summary))
EOF
) | tee -a "$out"
bad=$(grep -c '"ok": false' "$lines")
[ "$bad" -eq 0 ] || { echo "run.sh: $bad run(s) failed (see $logs)" >&2; exit 1; }
