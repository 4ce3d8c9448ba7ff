#!/usr/bin/env bash
# The time from nothing to the demo's result: README.md's first command, run as a new
# user runs it, on a fresh Debian 12 (a debootstrap --variant=minbase chroot: no
# compiler, no CMake, nothing of libtune's) with a clean clone of this repository.
#
#   bench/first_result.sh [COMMIT] [--keep]
#
# COMMIT (default HEAD) is cloned from this repository; its README's first Quick start
# command runs in the chroot, timed from its start to the demo's JSON line. Prints one
# JSON line: commit, the command, seconds in total, the demo's own wall_s, the demo's
# result. Needs root, debootstrap and the Debian mirror (LIBTUNE_DEBIAN_MIRROR). The
# chroot's base is made once in /var/tmp/libtune-bench-bookworm (reused; the chroot
# itself is a fresh copy each run).
set -euo pipefail
commit=HEAD
keep=0
for a in "$@"; do
  case "$a" in
    --keep) keep=1 ;;
    *) commit=$a ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=${LIBTUNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=/var/tmp/libtune-bench-bookworm
say() { echo "[first-result] $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root"; exit 2; }
if [ ! -e "$base/.complete" ]; then
  say "making the Debian 12 base (debootstrap --variant=minbase bookworm)"
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" "$mirror" > /var/tmp/libtune-bench-debootstrap.log 2>&1
  touch "$base/.complete"
fi
work=$(mktemp -d /var/tmp/libtune-first-result-XXXXXX)
cleanup() { [ "$keep" = 1 ] && say "kept $work" || rm -rf "$work"; }
trap cleanup EXIT
root=$work/root
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
sha=$(git -C "$repo" rev-parse "$commit")
git clone -q --no-checkout "$repo" "$root/root/libtune"
git -C "$root/root/libtune" checkout -q "$sha"
# The Fashion-MNIST files the demo reads come from Debian's dataset-fashion-mnist,
# which the command installs: nothing of this machine's data goes in.
cmd=$(awk '/^## Quick start/{q=1} q && /^```/{if (inb) exit; inb=1; next} inb && NF{print}' "$root/root/libtune/README.md" | sed -n 1p)
say "commit $(git -C "$repo" rev-parse --short "$sha"): $cmd"
cat > "$root/root/run.sh" <<EOF
set -eo pipefail
cd /root/libtune
export DEBIAN_FRONTEND=noninteractive
start=\$(date +%s.%N)
$cmd > /root/out.log 2> /root/err.log
end=\$(date +%s.%N)
echo "\$start \$end" > /root/times
EOF
set +e
unshare -m --propagation private sh -c '
  mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && mount -t tmpfs tmpfs "$1/tmp" &&
  exec chroot "$1" /bin/bash /root/run.sh' sh "$root"
rc=$?
set -e
if [ $rc != 0 ]; then
  say "the command failed ($rc):"; tail -30 "$root/root/err.log" >&2; tail -5 "$root/root/out.log" >&2
  keep=1; exit 1
fi
read -r start end < "$root/root/times"
result=$(grep '^{' "$root/root/out.log" | tail -1) || true
if [ -z "$result" ]; then
  say "the command ended without the demo's JSON line:"; tail -30 "$root/root/err.log" >&2; tail -5 "$root/root/out.log" >&2
  keep=1; exit 1
fi
warnings=$(cat "$root/root/out.log" "$root/root/err.log" | { grep -c 'warning:' || true; })
python3 - "$sha" "$cmd" "$start" "$end" "$result" "$warnings" <<'PY'
import json, sys
sha, cmd, start, end, result, warnings = sys.argv[1:]
r = json.loads(result)
print(json.dumps({"commit": sha[:12], "command": cmd, "total_s": round(float(end) - float(start), 1),
                  "demo_wall_s": r.get("wall_s"), "compiler_warnings": int(warnings),
                  "test_acc": r.get("test_acc"), "best_val_acc": r.get("best_val_acc"), "trials": r.get("trials")}))
PY
