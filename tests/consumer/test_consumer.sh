#!/usr/bin/env bash
# libtune in a user's own project (tests/consumer: my_tuner.cpp and a CMakeLists.txt of
# its own), as docs/install.md tells a user to build it.
#
#   tests/consumer/test_consumer.sh installed BUILD_DIR
#     cmake --install BUILD_DIR into a fresh prefix; checks what is there (the public
#     headers only, each compiling on its own; libtune.so with its SONAME; run paths
#     free of the build tree); builds my_tuner with find_package(libtune) and with
#     pkg-config, and runs it and the installed `tune` with the build and source trees
#     hidden (a tmpfs over each); the bad inputs: find_package(libtune 99), a missing
#     dependency, a script that forgets tune::init.
#   tests/consumer/test_consumer.sh subproject
#     builds my_tuner with libtune as a subproject (add_subdirectory), as a user's
#     project does (its own build type), and runs it; configures it with FetchContent
#     from libtune's git repository.
set -euo pipefail
mode=${1:?usage: test_consumer.sh installed BUILD_DIR | subproject}
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
say() { echo "[consumer-$mode] $*"; }
fail() { say "FAILED: $*"; exit 1; }
work=$(mktemp -d /tmp/libtune-consumer-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$here" "$work/src"  # the user's project lives outside libtune's tree
cd "$work"                 # and its results go there (tune_results/)
rm -f "$work/src/test_consumer.sh"
export TUNE_SHARED_DIR=$work/shared  # its embedded cluster is not another test's

# Runs my_tuner (an embedded cluster, 6 trials on 2 CPUs) and checks its JSON line.
check_run() {
  local program=$1 what=$2 out
  out=$("${hide[@]}" timeout 120 "$program" --local --num-cpus 2 2> "$work/run.err") ||
    { cat "$work/run.err"; fail "$what: my_tuner failed"; }
  python3 - "$out" "$what" <<'EOF' || { cat "$work/run.err"; fail "$what: wrong result"; }
import json, sys
r = json.loads(sys.argv[1].strip().splitlines()[-1])
assert r["trials"] == 6 and r["errors"] == 0, r
assert r["library_version"] == r["header_version"], r
assert 1 / 3 <= r["best_loss"] < 1 / 3 + 2 * 64, r
assert set(r["best_config"]) == {"x", "y"}, r
print(f"{sys.argv[2]}: 6 trials, best loss {r['best_loss']:.3f} (libtune {r['library_version']})")
EOF
}

. "$source_dir/tests/hide_trees.sh"  # hide=() and hide_trees
if [ "$mode" = installed ]; then
  build=$(cd "${2:?usage: test_consumer.sh installed BUILD_DIR}" && pwd)
  prefix=$work/prefix
  cmake --install "$build" --prefix "$prefix" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
  libdir=$(dirname "$(find "$prefix" -name 'libtune.so' | head -1)")
  [ -n "$libdir" ] || fail "no libtune.so in $prefix"

  # The library: a SONAME with its version, the link names beside it.
  soname=$(readelf -d "$libdir/libtune.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ "$soname" =~ ^libtune\.so\.[0-9]+\.[0-9]+$ ]] || fail "libtune.so's SONAME is '$soname'"
  [ -e "$libdir/$soname" ] || fail "$soname is not installed beside libtune.so"
  say "ok: $libdir/libtune.so, SONAME $soname"

  # Nothing installed runs from the build tree: no run path names it.
  for f in "$prefix"/bin/* "$libdir"/libtune.so.*.*.*; do
    rp=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\?PATH).*\[\(.*\)\]/\2/p')
    case "$rp" in *"$build"*|*"$source_dir"*) fail "$f's run path is $rp";; esac
  done
  say "ok: the run paths of bin/* and libtune.so name neither the build nor the source tree"

  # The headers: tune/tune.hpp and what it includes (and tune/version.hpp), each compiling
  # on its own with nothing but the prefix and nlohmann's JSON; nothing of CAF's.
  include=$prefix/include
  closure=$(cd "$include" && g++ -std=c++20 -I. -MM tune/tune.hpp | tr ' \\' '\n\n' | grep '^tune/' | sort -u)
  installed=$(cd "$include" && find . -type f | sed 's|^\./||' | grep -v '^tune/version.hpp$' | sort)
  extra=$(comm -13 <(echo "$closure") <(echo "$installed"))
  [ -z "$extra" ] || fail "installed headers that tune/tune.hpp does not need: $extra"
  if grep -rlE '#include [<"](caf/|actors/|tune/(cluster|host|net|run|train|trial/process))' "$include"; then
    fail "an installed header includes CAF's or libtune's internal headers"
  fi
  for h in $installed tune/version.hpp; do
    echo "#include <$h>" | g++ -std=c++20 -fsyntax-only -Wall -Wextra -I"$include" -x c++ - 2> "$work/h.err" ||
      { cat "$work/h.err"; fail "$h does not compile on its own"; }
  done
  say "ok: $(echo "$installed" | wc -l) headers + tune/version.hpp, each compiles on its own"

  # find_package(libtune) in the user's project.
  cmake -S "$work/src" -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" > "$work/conf.log" 2>&1 ||
    { cat "$work/conf.log"; fail "find_package(libtune) did not configure"; }
  start=$(date +%s.%N)
  cmake --build "$work/b" > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "my_tuner did not build"; }
  say "ok: my_tuner and my_tuner_no_init built against the installed package in $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s"
  ! grep -q 'warning:' "$work/build.log" || { cat "$work/build.log"; fail "warnings building my_tuner"; }

  # pkg-config, without CMake.
  export PKG_CONFIG_PATH=$libdir/pkgconfig
  g++ -O1 -o "$work/my_tuner_pc" "$work/src/my_tuner.cpp" $(pkg-config --cflags --libs libtune) -Wl,-rpath,"$libdir" \
    2> "$work/pc.err" || { cat "$work/pc.err"; fail "my_tuner did not build with pkg-config"; }
  say "ok: built with \$(pkg-config --cflags --libs libtune) (libtune $(pkg-config --modversion libtune))"

  # Run with the build and source trees out of sight: a tmpfs over each (a mount
  # namespace of this command only).
  if hide_trees "$build" "$source_dir"; then
    say "running with $build and $source_dir hidden"
  else
    say "not root: running with the build tree in place"
  fi
  "${hide[@]}" "$prefix/bin/tune" --version > "$work/version.txt" 2>&1 || { cat "$work/version.txt"; fail "installed tune --version"; }
  say "ok: installed $(cat "$work/version.txt")"
  check_run "$work/b/my_tuner" "find_package"
  # The installed demo: its trials run the node's copy of it (programs/<sha256>), where
  # its run path $ORIGIN/../lib leads nowhere; they must find the prefix's libtune.so.
  if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${TUNE_FASHION_MNIST_DIR:-}" ]; then
    (cd "$work" && "${hide[@]}" timeout 180 "$prefix/bin/tune-example-fashion-mnist" --samples 2 --epochs 1 \
       --progress none > "$work/demo.json" 2> "$work/demo.err") || { cat "$work/demo.err"; fail "the installed demo failed"; }
    python3 -c 'import json, sys; r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); assert r["trials"] == 2 and r["errors"] == 0, r' \
      "$work/demo.json" || { cat "$work/demo.json" "$work/demo.err"; fail "the installed demo's trials failed"; }
    say "ok: the installed tune-example-fashion-mnist: 2 trials, no errors"
  else
    say "no Fashion-MNIST here (dataset-fashion-mnist): the installed demo is not run"
  fi
  check_run "$work/my_tuner_pc" "pkg-config"

  # Bad input. A version the install does not have: CMake's own message.
  if cmake -S "$work/src" -B "$work/b99" -DCMAKE_PREFIX_PATH="$prefix" -DLIBTUNE_REQUIRED_VERSION=99 > "$work/b99.log" 2>&1; then
    fail "find_package(libtune 99) configured"
  fi
  grep -q 'requested version "99"' "$work/b99.log" && grep -q 'libtuneConfig.cmake, version: ' "$work/b99.log" ||
    { cat "$work/b99.log"; fail "find_package(libtune 99) does not say which versions there are"; }
  say "ok: find_package(libtune 99): $(grep -A5 'requested version' "$work/b99.log" | tr -s ' \n' ' ')"
  # A dependency that is not there (nlohmann's JSON, out of sight with everything else
  # below /usr): find_dependency names it, from libtuneConfig.cmake.
  if cmake -S "$work/src" -B "$work/bdep" -DCMAKE_PREFIX_PATH="$prefix" "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local" \
       > "$work/bdep.log" 2>&1; then
    fail "configured without nlohmann_json"
  fi
  grep -q 'provided by "nlohmann_json"' "$work/bdep.log" && grep -q 'libtuneConfig.cmake.*find_dependency' "$work/bdep.log" ||
    { cat "$work/bdep.log"; fail "a missing dependency is not named"; }
  say "ok: without nlohmann_json: $(grep -m1 'Could not find a package configuration file provided by' "$work/bdep.log" | tr -s ' ')"
  # A script that forgets tune::init: its trials end in error, saying so.
  set +e
  "${hide[@]}" timeout 120 "$work/b/my_tuner_no_init" > "$work/noinit.out" 2> "$work/noinit.err"
  rc=$?
  set -e
  grep -q 'tune::init' "$work/noinit.out" "$work/noinit.err" ||
    { cat "$work/noinit.out" "$work/noinit.err"; fail "without tune::init (exit $rc): no message naming tune::init"; }
  say "ok: without tune::init (exit $rc): $(grep -h -m1 'tune::init' "$work/noinit.out" "$work/noinit.err")"
elif [ "$mode" = subproject ]; then
  # The user's project chooses its build type (none here, as CMake's default) and gets
  # only the library: none of libtune's tests, benchmarks, examples or tools.
  cmake -S "$work/src" -B "$work/b" -G Ninja -DLIBTUNE_SOURCE_DIR="$source_dir" > "$work/conf.log" 2>&1 ||
    { cat "$work/conf.log"; fail "add_subdirectory(libtune) did not configure"; }
  targets=$(ninja -C "$work/b" -t targets all | cut -d: -f1)
  grep -qx my_tuner <<< "$targets" || fail "no my_tuner target"
  for t in tune fashion_mnist quantity_test bench_pg; do
    if grep -qx "$t" <<< "$targets"; then fail "the subproject defines $t"; fi
  done
  start=$(date +%s.%N)
  cmake --build "$work/b" --target my_tuner > "$work/build.log" 2>&1 || { tail -50 "$work/build.log"; fail "my_tuner did not build"; }
  say "ok: my_tuner built with libtune as a subproject in $(python3 -c "print(f'{$(date +%s.%N) - $start:.0f}')") s"
  check_run "$work/b/my_tuner" "add_subdirectory"
  # FetchContent from libtune's git repository (this commit): it configures to the same
  # targets (its build is add_subdirectory's, above).
  if git -C "$source_dir" rev-parse HEAD > /dev/null 2>&1; then
    cmake -S "$work/src" -B "$work/fetch" -G Ninja -DLIBTUNE_GIT="file://$source_dir" \
      -DLIBTUNE_GIT_TAG="$(git -C "$source_dir" rev-parse HEAD)" > "$work/fetch.log" 2>&1 ||
      { cat "$work/fetch.log"; fail "FetchContent(libtune) did not configure"; }
    ninja -C "$work/fetch" -t targets all | cut -d: -f1 | grep -x my_tuner > /dev/null || fail "FetchContent: no my_tuner target"
    say "ok: FetchContent_MakeAvailable(libtune) from file://$source_dir at $(git -C "$source_dir" rev-parse --short HEAD) configures"
  fi
else
  echo "usage: test_consumer.sh installed BUILD_DIR | subproject" >&2
  exit 2
fi
say "all passed"
