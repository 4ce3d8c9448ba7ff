#!/usr/bin/env bash
# fetch_examples.sh DIR PYTHON: Ray Tune 2.60's own example scripts (ray/tune/examples/ of the
# ray wheel from PyPI) unpacked into DIR/ray/tune/examples, once per build folder (kept
# while DIR/.libtune-ray-version says the same version). They are read by
# run_examples.py and never copied into this tree. PYTHON (one with pip: the examples'
# venv) downloads the wheel. Needs PyPI, as the venvs' fixtures.
set -euo pipefail
dir=$1
python=$2
version=2.60.0
stamp="$dir/.libtune-ray-version"
if [ -d "$dir/ray/tune/examples" ] && [ "$(cat "$stamp" 2> /dev/null)" = "$version" ]; then
  echo "fetch_examples.sh: $dir has Ray $version's examples"
  exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/wheel"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.11 --platform manylinux2014_x86_64 -d "$dir/wheel" "ray==$version"
"$python" - "$dir" << 'PY'
import glob, sys, zipfile
d = sys.argv[1]
wheel = glob.glob(f"{d}/wheel/ray-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith("ray/tune/examples/"):
            z.extract(n, d)
PY
rm -rf "$dir/wheel"
echo "$version" > "$stamp"
echo "fetch_examples.sh: unpacked Ray $version's examples into $dir"
