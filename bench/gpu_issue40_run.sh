#!/usr/bin/env bash
# Issue 40 on the GPU machine (Ubuntu 24.04, no CAF, no apt, no libtune source build):
# an installed libtune (cmake --install of a CUDA build made on the development
# machine, carried as a tarball) used as a user would, from its prefix only.
#
#   bench/gpu_issue40_run.sh PREFIX DEVLIBS NLOHMANN_PREFIX DATA OUT_DIR
#
# PREFIX: the unpacked install (bin/tune, lib/libtune.so, include/, lib/cmake/libtune);
# DEVLIBS: the shared libraries Debian has and Ubuntu lacks (CAF, yaml-cpp, ...: what
# ../shared/tools/device-bundle copies); NLOHMANN_PREFIX: nlohmann's JSON headers and
# CMake package (the one dependency libtune's public headers have); DATA: Fashion-MNIST.
# 1. The installed CLI: tune --version, what the loader resolves for tune and libtune.so.
# 2. The installed demo, tune-example-fashion-mnist: 20 trials at 0.25 GPU with the CUDA
#    trainer (tune-train-worker from the prefix).
# 3. A user's project (tests/consumer, my_tuner.cpp) configured with find_package(libtune)
#    against PREFIX and built there with that machine's compiler (g++ 13), then run; and
#    built again with pkg-config.
# 4. The installed `tune run` of examples/pytorch/experiment.yaml (8 trials at 0.25 GPU,
#    PyTorch), the trials' Python module coming from the prefix.
set -uo pipefail
prefix=$(readlink -f "${1:?usage: gpu_issue40_run.sh PREFIX DEVLIBS NLOHMANN_PREFIX DATA OUT_DIR}")
devlibs=$(readlink -f "${2:?}"); nlohmann=$(readlink -f "${3:?}"); data=$(readlink -f "${4:?}"); out=${5:?}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
mkdir -p "$out"; out=$(readlink -f "$out")
step() { echo "== $1: exit $2 ($(date +%T))"; }
export LD_LIBRARY_PATH=$devlibs
export TUNE_FASHION_MNIST_DIR=$data TUNE_SHARED_DIR=/tmp/tune-issue40-shared TUNE_RUNTIME_DIR=/tmp/tune-issue40-rt
nvidia-smi -L > "$out/host.txt" 2>&1; date -u >> "$out/host.txt"; . /etc/os-release; echo "$PRETTY_NAME" >> "$out/host.txt"
g++ --version | head -1 >> "$out/host.txt"; cmake --version | head -1 >> "$out/host.txt"
cat "$out/host.txt"

# ---- 1. the CLI
"$prefix/bin/tune" --version > "$out/version.txt" 2>&1; step "installed tune --version: $(cat "$out/version.txt")" $?
for f in "$prefix/bin/tune" "$prefix/bin/tune-train-worker" "$prefix"/lib*/libtune.so; do
  echo "--- $f"; ldd "$f"
done > "$out/ldd.txt" 2>&1
grep -E "libtune|libcaf|not found" "$out/ldd.txt" | sort -u

# ---- 2. the installed demo on the card
(cd /tmp && timeout 300 "$prefix/bin/tune-example-fashion-mnist" --progress lines > "$out/demo.json" 2> "$out/demo.log")
step "installed tune-example-fashion-mnist" $?
tail -3 "$out/demo.log"; tail -1 "$out/demo.json"

# ---- 3. a user's project, built here against the prefix
w=$(mktemp -d); chmod 755 "$w"; cp -r "$repo/tests/consumer" "$w/src"; rm -f "$w/src/test_consumer.sh"
cmake -S "$w/src" -B "$w/b" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix;$nlohmann" > "$out/consumer-configure.log" 2>&1
step "find_package(libtune) configures" $?
start=$(date +%s.%N)
cmake --build "$w/b" --target my_tuner > "$out/consumer-build.log" 2>&1; rc=$?
echo "my_tuner build_s $(python3 -c "print(round($(date +%s.%N) - $start, 1))")" | tee "$out/consumer-build-time.txt"
step "my_tuner builds (g++ here, the installed headers and libtune.so)" $rc
(cd "$w" && timeout 120 "$w/b/my_tuner" --local --num-cpus 2 > "$out/my_tuner.json" 2> "$out/my_tuner.log")
step "my_tuner runs" $?; tail -1 "$out/my_tuner.json"
libdir=$(dirname "$(ls "$prefix"/lib*/libtune.so | head -1)")
if command -v pkg-config > /dev/null; then
  PKG_CONFIG_PATH=$libdir/pkgconfig g++ -O1 -o "$w/my_tuner_pc" "$w/src/my_tuner.cpp" -I"$nlohmann/include" \
    $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs libtune) -Wl,-rpath,"$libdir" > "$out/pc.log" 2>&1
  step "my_tuner with pkg-config" $?
  (cd "$w" && timeout 120 "$w/my_tuner_pc" --local --num-cpus 2 > "$out/my_tuner_pc.json" 2>> "$out/pc.log")
  step "my_tuner (pkg-config) runs" $?; tail -1 "$out/my_tuner_pc.json"
else
  echo "== no pkg-config on this machine: the pkg-config build is checked in CI only"
fi

# ---- 4. the installed tune run with PyTorch trials (the trials' module from the prefix)
p=$(mktemp -d); chmod 755 "$p"; cp "$repo/examples/pytorch/"{train.py,experiment.yaml} "$p/"
(cd "$p" && timeout 400 "$prefix/bin/tune" run experiment.yaml --local --samples 8 --progress lines \
   --experiment-dir "$p/exp" > "$out/pytorch.json" 2> "$out/pytorch.log")
step "installed tune run examples/pytorch (8 trials, 0.25 GPU)" $?
tail -4 "$out/pytorch.log"; tail -1 "$out/pytorch.json"
(cd "$out" && tar -czf all.tgz --exclude=all.tgz . 2>/dev/null)
