#!/usr/bin/env bash
# The Debian packages (cmake/packaging.cmake) on a clean Debian 12, with no build tree
# and no build tools: cpack makes them from BUILD_DIR; a debootstrap chroot (Debian 12,
# minbase; made once and kept in BUILD_DIR/packages-test/) gets them with apt, which
# fetches their dependencies from the Debian mirror. There:
#   - their control data: versions, computed dependencies, no maintainer script but
#     the library's ldconfig call;
#   - tune --version, `import libtune`, and `tune run` of a Python trial on an embedded
#     cluster (libtune0.1 + libtune-tools only);
#   - the user's project (tests/consumer) built against libtune-dev with CMake
#     (find_package) and with pkg-config, and run;
#   - an older version installed first, the current one over it: every file is the
#     new one's (dpkg --verify), none of the old's is left.
#
#   cmake/test_packages.sh BUILD_DIR
#
# Exits 77 (skipped) without root, debootstrap, dpkg-shlibdeps or the mirror
# (LIBTUNE_DEBIAN_MIRROR, default http://deb.debian.org/debian).
set -euo pipefail
SKIP=77
build=$(cd "${1:?usage: test_packages.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/.." && pwd)
mirror=${LIBTUNE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "[packages-test] $*"; }
fail() { say "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { say "skipped: needs root (chroot, mounts)"; exit $SKIP; }
for tool in debootstrap dpkg-shlibdeps cpack unshare; do
  command -v $tool > /dev/null || { say "skipped: $tool is missing (deploy/install-deps.sh installs it)"; exit $SKIP; }
done

state=$build/packages-test
work=$(mktemp -d /tmp/libtune-packages-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$state"

# The packages: the current version, and the same built as an older one (0.1.0~old).
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
[ -n "$version" ] || fail "no CPACK_PACKAGE_VERSION in $build/CPackConfig.cmake"
(cd "$build" && cpack -G DEB -B "$work/new" > "$work/cpack-new.log" 2>&1) || { cat "$work/cpack-new.log"; fail "cpack"; }
(cd "$build" && cpack -G DEB -B "$work/old" -D CPACK_PACKAGE_VERSION="${version}~old" > "$work/cpack-old.log" 2>&1) ||
  { cat "$work/cpack-old.log"; fail "cpack (older version)"; }
debs=$(cd "$work/new" && ls *.deb | sort | tr '\n' ' ')
[ "$(echo $debs | wc -w)" = 3 ] || fail "cpack made: $debs (expected libtune0.x, libtune-dev, libtune-tools)"
for d in "$work"/new/*.deb; do say "made $(basename "$d"): $(du -k "$d" | cut -f1) KiB"; done

# Control data.
runtime=$(ls "$work"/new/libtune[0-9]*.deb)
dev=$(ls "$work"/new/libtune-dev_*.deb)
tools=$(ls "$work"/new/libtune-tools_*.deb)
field() { dpkg-deb -f "$1" "$2"; }
rt_name=$(field "$runtime" Package)
[ "$(field "$runtime" Version)" = "$version" ] || fail "$rt_name's version is $(field "$runtime" Version), not $version"
grep -q 'libcaf-io0.17' <<< "$(field "$runtime" Depends)" || fail "$rt_name's Depends lack CAF: $(field "$runtime" Depends)"
grep -q "$rt_name (= $version)" <<< "$(field "$dev" Depends)" || fail "libtune-dev does not depend on $rt_name (= $version)"
grep -q 'nlohmann-json3-dev' <<< "$(field "$dev" Depends)" || fail "libtune-dev does not depend on nlohmann-json3-dev"
grep -q "$rt_name (= $version)" <<< "$(field "$tools" Depends)" || fail "libtune-tools does not depend on $rt_name (= $version)"
grep -q 'libboost-program-options' <<< "$(field "$tools" Depends)" || fail "libtune-tools' Depends lack Boost: $(field "$tools" Depends)"
for d in "$runtime" "$dev" "$tools"; do
  scripts=$(dpkg-deb --ctrl-tarfile "$d" | tar -t | grep -E 'preinst|postinst|prerm|postrm' || true)
  for s in $scripts; do
    # CPack's: `if [ "$1" = "configure" ]; then ldconfig; fi` (postrm: "remove"), nothing else.
    other=$(dpkg-deb --ctrl-tarfile "$d" | tar -xO "$s" |
            grep -vE '^#!/bin/sh$|^$|^set -e$|^if \[ "\$1" = "(configure|remove)" \]; then$|^\s*ldconfig$|^fi$' || true)
    [ -z "$other" ] || fail "$(basename "$d") has a maintainer script $s that does more than ldconfig: $other"
  done
done
dpkg-deb -c "$tools" | grep 'lib/systemd/system/libtune-node.service' > /dev/null || fail "libtune-tools lacks the node's unit"
dpkg-deb --fsys-tarfile "$tools" | tar -xO ./usr/lib/systemd/system/libtune-node.service | grep '^ExecStart=/usr/bin/tune ' > /dev/null ||
  fail "the packaged node unit does not start /usr/bin/tune"
say "ok: control data (versions, dependencies, only ldconfig in maintainer scripts, units not started)"

# The clean system, made once.
base=$state/bookworm-minbase
if [ ! -e "$base/.complete" ]; then
  rm -rf "$base"
  say "making a Debian 12 chroot (debootstrap --variant=minbase bookworm, once)"
  if ! debootstrap --variant=minbase bookworm "$base" "$mirror" > "$state/debootstrap.log" 2>&1; then
    if grep -qiE 'resolve|connect|download|release signed' "$state/debootstrap.log"; then
      say "skipped: debootstrap could not reach $mirror"; tail -3 "$state/debootstrap.log"; exit $SKIP
    fi
    cat "$state/debootstrap.log"; fail "debootstrap"
  fi
  touch "$base/.complete"
fi
root=$work/root
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/debs/new" "$root/debs/old" "$root/consumer"
cp "$work"/new/*.deb "$root/debs/new/"
cp "$work"/old/*.deb "$root/debs/old/"
cp "$source_dir"/tests/consumer/CMakeLists.txt "$source_dir"/tests/consumer/my_tuner.cpp "$root/consumer/"

# Everything below runs in the chroot, in a mount namespace of its own (its /proc and
# /dev go away with it).
cat > "$root/test.sh" <<'EOF'
set -euo pipefail
say() { echo "[packages-test:chroot] $*"; }
fail() { say "FAILED: $*"; exit 1; }
export DEBIAN_FRONTEND=noninteractive TUNE_SHARED_DIR=/tmp/tune-shared LC_ALL=C.UTF-8
apt-get update -qq
if command -v g++ > /dev/null || command -v cmake > /dev/null; then fail "the clean system has build tools"; fi

# The older version first, then the current one over it.
apt-get install -y -qq --no-install-recommends /debs/old/libtune[0-9]*.deb /debs/old/libtune-tools_*.deb > /tmp/apt-old.log ||
  { cat /tmp/apt-old.log; fail "apt install of the older packages"; }
old_files=$(dpkg -L libtune-tools "$(dpkg-deb -f /debs/new/libtune[0-9]*.deb Package)" | sort)
apt-get install -y -qq --no-install-recommends /debs/new/libtune[0-9]*.deb /debs/new/libtune-tools_*.deb > /tmp/apt-new.log ||
  { cat /tmp/apt-new.log; fail "apt install of the packages over the older ones"; }
v=$(dpkg-query -W -f '${Version}' libtune-tools)
[ "$v" = "$(dpkg-deb -f /debs/new/libtune-tools_*.deb Version)" ] || fail "libtune-tools is at $v after the upgrade"
dpkg --verify libtune-tools "$(dpkg-deb -f /debs/new/libtune[0-9]*.deb Package)" || fail "dpkg --verify after the upgrade"
new_files=$(dpkg -L libtune-tools "$(dpkg-deb -f /debs/new/libtune[0-9]*.deb Package)" | sort)
for f in $(comm -23 <(echo "$old_files") <(echo "$new_files")); do
  if [ -e "$f" ] && [ ! -d "$f" ]; then fail "$f of the older version is left"; fi
done
say "ok: the older packages, then the current ones over them: $v, every file verified, nothing left"
if [ -e /etc/systemd/system/multi-user.target.wants/libtune-node.service ]; then fail "the node's unit was enabled"; fi

tune --version
python3 -c 'import libtune; print("import libtune:", libtune.__file__)'
mkdir -p /tmp/exp && cd /tmp/exp
cat > train.py <<'PY'
import libtune
c = libtune.config()
for i in range(3):
    libtune.report(loss=(c["x"] - 0.3) ** 2 + 1 / (i + 1))
PY
out=$(tune run --local --num-cpus 2 --progress none --metric loss --mode min --samples 4 \
        --space '{"x": {"uniform": [-1, 1]}}' -- python3 train.py 2> /tmp/run.err) || { cat /tmp/run.err; fail "tune run"; }
echo "$out" | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); assert r["trials"]==4 and r["errors"]==0, r; print("tune run:", r["trials"], "trials, best", r["best_value"])' ||
  { cat /tmp/run.err; fail "tune run's result: $out"; }

# The user's project against libtune-dev: the compiler and CMake are the user's.
apt-get install -y -qq --no-install-recommends /debs/new/libtune-dev_*.deb g++ cmake make pkg-config > /tmp/apt-dev.log ||
  { cat /tmp/apt-dev.log; fail "apt install libtune-dev"; }
cmake -S /consumer -B /tmp/b > /tmp/conf.log 2>&1 || { cat /tmp/conf.log; fail "find_package(libtune) in the chroot"; }
start=$(date +%s.%N)
cmake --build /tmp/b --target my_tuner > /tmp/build.log 2>&1 || { cat /tmp/build.log; fail "building my_tuner in the chroot"; }
say "ok: my_tuner built against libtune-dev in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
g++ -O1 -o /tmp/my_tuner_pc /consumer/my_tuner.cpp $(pkg-config --cflags --libs libtune) || fail "pkg-config build"
for p in /tmp/b/my_tuner /tmp/my_tuner_pc; do
  out=$(timeout 120 "$p" --local --num-cpus 2 2> /tmp/my.err) || { cat /tmp/my.err; fail "$p"; }
  echo "$out" | tail -1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); assert r["trials"]==6 and r["errors"]==0, r; print(sys.argv[1], "->", r["trials"], "trials, best loss", round(r["best_loss"], 3))' "$p" ||
    { cat /tmp/my.err; fail "$p's result: $out"; }
done
say "all passed"
EOF
unshare -m --propagation private sh -c '
  mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && mount -t tmpfs tmpfs "$1/tmp" &&
  exec chroot "$1" /bin/bash /test.sh' sh "$root" 2>&1 | tee "$work/chroot.log"
[ "${PIPESTATUS[0]}" = 0 ] || fail "in the chroot (above)"
say "all passed"
