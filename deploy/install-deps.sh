#!/usr/bin/env bash
# Installs what libtune needs to build, test and run on Debian 12, when it is missing.
# Idempotent, and quiet when everything is there. Uses sudo when not run as root.
# LIBTUNE_DEPS=build: only what building and running need (no test tools).
# CUDA (nvcc, cuBLAS, cuDNN) is optional and not installed here: with it the CUDA
# parts build too.
set -euo pipefail

# To build and run.
packages=(
  cmake ninja-build g++ make file         # build
  libcaf-dev                              # CAF 0.17: actors and remote messaging
  libboost-program-options-dev            # command-line options
  nlohmann-json3-dev                      # JSON
  libssl-dev                              # TLS between the cluster's processes; SHA-256 of programs
  libsqlite3-dev                          # the experiment store
  libopenblas-dev                         # matrix products of the CPU training path
  zlib1g-dev                              # reading the gzip-compressed IDX files
  dataset-fashion-mnist                   # the training data
  pkg-config libcpp-httplib-dev           # the head's web dashboard (HTTP)
  libre2-dev                              # metrics read from a program trial's output
  libyaml-cpp-dev                         # tune run's experiment files
  libeigen3-dev libnlopt-dev libnlopt-cxx-dev  # the GP search: linear algebra, optimizers
  python3                                 # the trials' Python module and its tests
  python3-cloudpickle                     # the Python driver API (libtune.tune) sends trainables with it
  python3-venv                            # python/build-wheel.sh's build tools, the wheel's test venv
)
# To test as well (left out with LIBTUNE_DEPS=build, e.g. in the container image).
if [ "${LIBTUNE_DEPS:-all}" != build ]; then
  packages+=(
    libgtest-dev libgmock-dev             # tests
    iproute2                              # network namespaces for the multi-host tests
    prometheus                            # promtool checks the /metrics page in the tests
    chromium chromium-driver python3-selenium  # the dashboard's tests in a real browser
    slurmctld slurmd slurm-client         # the Slurm batch script's test (deploy/slurm)
    tshark                                # captures a TLS cluster's traffic: no token, no config in clear
    dpkg-dev debootstrap                  # the Debian packages: dpkg-shlibdeps, a clean Debian 12 to install them in
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
