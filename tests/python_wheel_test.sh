#!/usr/bin/env bash
# ctest python_wheel: libtune's wheel as a user gets it (docs/install.md, "pip install
# (wheel)").
#
#   tests/python_wheel_test.sh BUILD_DIR
#
# Builds the wheel once with python/build-wheel.sh (into BUILD_DIR/python_wheel), checks
# with `auditwheel show` that it needs nothing outside the manylinux_2_36 policy and what
# it holds (the package, tune, libtune.so, the grafted libraries; stripped; no headers),
# installs it into a fresh virtual environment of Debian's python3, and then, with the
# source and build trees hidden (a tmpfs over each, in a mount namespace of the command
# only) and neither on PYTHONPATH nor PATH: `tune --version`, ldd of the installed
# programs (every library from the wheel or the platform's), a tuning with `tune run`
# of a script that imports libtune, the trial module's tests against the installed
# package (python/tests, copied out of the tree), and python/tests/wheel_smoke.py when
# there is one.
set -euo pipefail
build=$(cd "${1:?usage: python_wheel_test.sh BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/.." && pwd)
say() { echo "[python-wheel] $*"; }
fail() { say "FAILED: $*"; exit 1; }
work=$(mktemp -d /tmp/libtune-wheel-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
tools=${LIBTUNE_WHEEL_TOOLS:-/var/tmp/libtune-wheel-tools}
arch=$(uname -m)
# The libraries a manylinux wheel may take from the system (auditwheel's policy).
platform_libs='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|libanl\.so\.1|libnsl\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libatomic\.so\.1|libz\.so\.1|libexpat\.so\.1)$'

# --- 1. The wheel: one build ------------------------------------------------------------
dist=$build/python_wheel
rm -f "$dist"/libtune-*.whl
start=$SECONDS
"$source_dir/python/build-wheel.sh" "$dist" > "$work/build.out" 2> "$work/build.err" ||
  { cat "$work/build.err"; fail "python/build-wheel.sh $dist"; }
wheel=$(tail -1 "$work/build.out")
[ -f "$wheel" ] || { cat "$work/build.out" "$work/build.err"; fail "python/build-wheel.sh printed no wheel"; }
name=$(basename "$wheel")
version=$(echo "$name" | cut -d- -f2)
size_kib=$(du -k "$wheel" | cut -f1)
say "ok: built $name ($size_kib KiB) in $((SECONDS - start)) s"
[[ "$name" == libtune-*-py3-none-*manylinux_2_36_$arch*.whl ]] || fail "$name: not a py3-none-manylinux_2_36_$arch wheel"
cp "$wheel" "$work/"  # the build tree is hidden below
wheel=$work/$name

# --- 2. What the wheel needs and holds ---------------------------------------------------
"$tools/bin/auditwheel" show "$wheel" > "$work/show.txt" 2>&1 || { cat "$work/show.txt"; fail "auditwheel show"; }
tag=$(tr -s ' \n' ' ' < "$work/show.txt" | sed -n 's/.*is consistent with the following platform tag: "\([^"]*\)".*/\1/p')
glibc_minor=$(echo "$tag" | sed -n "s/^manylinux_2_\([0-9]*\)_$arch\$/\1/p")
[ -n "$glibc_minor" ] && [ "$glibc_minor" -le 36 ] ||
  { cat "$work/show.txt"; fail "auditwheel show: the wheel is not consistent with manylinux_2_36_$arch (it says '$tag')"; }
if grep -q 'external shared libraries are required' "$work/show.txt"; then
  cat "$work/show.txt"; fail "auditwheel show: the wheel needs libraries outside the policy"
fi
say "ok: auditwheel show: consistent with $tag (so manylinux_2_36_$arch too), no external library outside the policy"

"$tools/bin/python" -m zipfile -e "$wheel" "$work/unzipped"
(cd "$work/unzipped" && find . -type f | sed 's|^\./||' | sort) > "$work/files.txt"
for f in libtune/__init__.py libtune/_cli.py libtune/_engine_path.py libtune/bin/tune libtune/lib/libtune.so.0.1; do
  grep -qx "$f" "$work/files.txt" || fail "the wheel has no $f"
done
for lib in libcaf_core libcaf_io libboost_program_options libyaml-cpp libre2 libsqlite3 libssl libcrypto; do
  grep -q "^libtune\.libs/$lib-" "$work/files.txt" || fail "the wheel has no libtune.libs/$lib-*"
done
if grep -vE '^(libtune/.*\.py|libtune/bin/tune|libtune/lib/libtune\.so\.0\.1|libtune\.libs/[^/]+\.so[.0-9]*|libtune-[^/]*\.dist-info/.*)$' "$work/files.txt"; then
  fail "the wheel holds the files above, which it should not (headers, other programs, ...)"
fi
while read -r f; do
  if readelf -S "$work/unzipped/$f" | grep -qE '\.(symtab|debug_info)\b'; then fail "$f is not stripped"; fi
done < <(grep -E '(bin/tune|\.so[.0-9]*)$' "$work/files.txt")
[ "$size_kib" -le 20480 ] || fail "the wheel is $size_kib KiB: more than 20 MiB"
say "ok: $(wc -l < "$work/files.txt") files: the package, bin/tune, lib/libtune.so.0.1, $(grep -c '^libtune\.libs/' "$work/files.txt") grafted libraries, all stripped; nothing else"

# --- 3. A fresh virtual environment ----------------------------------------------------
/usr/bin/python3 -m venv "$work/venv" > "$work/venv.log" 2>&1 ||
  { cat "$work/venv.log"; fail "/usr/bin/python3 -m venv (apt install python3-venv; deploy/install-deps.sh)"; }
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel" > "$work/pip.log" 2>&1 ||
  { cat "$work/pip.log"; fail "pip install $name into a fresh venv"; }
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
tune_bin=$site/libtune/bin/tune
[ -x "$tune_bin" ] || fail "no $tune_bin after pip install"
[ -x "$work/venv/bin/tune" ] || fail "pip install made no tune command in the venv's bin/"
installed=$("$work/venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | awk 'NR > 2 {printf "%s%s %s", sep, $1, $2; sep = ", "}')
say "ok: pip install into a fresh venv of $(/usr/bin/python3 --version): $installed"

# Everything below: the source and build trees hidden, a clean environment.
. "$source_dir/tests/hide_trees.sh"
if hide_trees "$build" "$source_dir"; then
  say "running with $build and $source_dir hidden"
else
  say "not root: running with the source and build trees in place (not on PATH or PYTHONPATH)"
fi
mkdir -p "$work/home" "$work/tmp" "$work/run" "$work/pytests" "$work/smoke"
cp -r "$source_dir/python/tests" "$work/pytests/tests"
find "$work/pytests" -name __pycache__ -prune -exec rm -rf {} +
clean_env=(PATH="$work/venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="$work/home" LANG=C.UTF-8 TMPDIR="$work/tmp"
           TUNE_SHARED_DIR="$work/shared")
run() { (cd "$1" && shift && "${hide[@]}" env -i "${clean_env[@]}" "$@"); }

out=$(run "$work" tune --version 2>&1) || fail "tune --version: $out"
[ "$out" = "libtune $version" ] || fail "tune --version says '$out', not 'libtune $version'"
paths=$(run "$work" python -c 'import libtune, libtune._engine_path as e; print(libtune.__file__); print(e.tune_binary())')
[ "$paths" = "$site/libtune/__init__.py"$'\n'"$tune_bin" ] || fail "the installed package or its tune is not the one used: $paths"
out=$(run "$work" env LIBTUNE_TUNE=/nonexistent/tune tune --version 2>&1) && fail "tune ran with LIBTUNE_TUNE=/nonexistent/tune"
[[ "$out" == *LIBTUNE_TUNE=/nonexistent/tune* ]] || fail "a wrong LIBTUNE_TUNE is not named: $out"
say "ok: tune --version: $(run "$work" tune --version) (the venv's tune command runs the wheel's $tune_bin)"

for f in "$tune_bin" "$site/libtune/lib/libtune.so.0.1"; do
  run "$work" ldd "$f" > "$work/ldd.txt" 2>&1 || { cat "$work/ldd.txt"; fail "ldd $f"; }
  if grep -q 'not found' "$work/ldd.txt"; then cat "$work/ldd.txt"; fail "ldd $f: a library is not found"; fi
  while read -r lib _ path _; do
    [ -z "$path" ] || path=$(realpath -m "$path")
    case "$path" in "$site"/libtune/lib/*|"$site"/libtune.libs/*) continue ;; esac
    [[ "$(basename "$lib")" =~ $platform_libs ]] || { cat "$work/ldd.txt"; fail "ldd $f: $lib comes from $path, outside the wheel"; }
  done < "$work/ldd.txt"
done
say "ok: ldd: tune and libtune.so.0.1 load only the wheel's libraries and the platform's ($(grep -c libtune.libs "$work/ldd.txt") from libtune.libs/)"

# --- 4. A tuning --------------------------------------------------------------------------
printf 'import libtune\nlibtune.report(loss=libtune.config()["x"])\n' > "$work/run/train.py"
run "$work/run" timeout 120 tune run --metric loss --mode min --samples 3 --space '{"x":{"uniform":[0,1]}}' \
  --progress none -- python train.py > "$work/run.out" 2> "$work/run.err" || { cat "$work/run.out" "$work/run.err"; fail "tune run"; }
"$work/venv/bin/python" - "$work/run.out" <<'EOF' || { cat "$work/run.out" "$work/run.err"; fail "tune run: wrong result"; }
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["trials"] == 3 and r["errors"] == 0 and r["results"] == 3, r
assert set(r["best_config"]) == {"x"} and 0 <= r["best_config"]["x"] <= 1, r
assert r["best_value"] == r["best_config"]["x"], r
print(f"[python-wheel] ok: tune run: 3 trials of `python train.py` (import libtune), best loss {r['best_value']:.3f}")
EOF

# --- 5. The trial module's tests, against the installed package ---------------------------
start=$SECONDS
run "$work" env LIBTUNE_TUNE="$tune_bin" LIBTUNE_TEST_WHEEL="$wheel" timeout 600 \
  python -m unittest discover -s "$work/pytests/tests" > "$work/unittest.log" 2>&1 ||
  { cat "$work/unittest.log"; fail "python -m unittest discover (python/tests) against the installed package"; }
say "ok: python/tests against the installed package: $(grep -E '^Ran ' "$work/unittest.log"), $(tail -1 "$work/unittest.log") in $((SECONDS - start)) s"

if [ -f "$work/pytests/tests/wheel_smoke.py" ]; then
  run "$work/smoke" timeout 300 python "$work/pytests/tests/wheel_smoke.py" > "$work/smoke.log" 2>&1 ||
    { cat "$work/smoke.log"; fail "python/tests/wheel_smoke.py with the installed package"; }
  say "ok: python/tests/wheel_smoke.py: $(tail -1 "$work/smoke.log")"
else
  say "no python/tests/wheel_smoke.py: not run"
fi
say "all passed"
