#!/usr/bin/env bash
# make_venv.sh VENV [REQUIREMENTS]: a tests' virtual environment (REQUIREMENTS, by default
# the trackers' requirements.txt beside this script) made once per build folder: made
# again only when the requirements change. Run by CTest as a fixture (tracker_venv,
# ray_examples_venv) before the tests that use it.
set -euo pipefail
venv=$1
here=$(cd "$(dirname "$0")" && pwd)
requirements=${2:-$here/requirements.txt}
stamp="$venv/.libtune-requirements"
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then
  echo "make_venv.sh: $venv is ready"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
echo "make_venv.sh: made $venv"
