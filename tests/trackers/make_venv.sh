#!/usr/bin/env bash
# make_venv.sh VENV: the trackers' tests' virtual environment (requirements.txt beside
# this script) made once per build folder: made again only when requirements.txt
# changes. Run by CTest as the fixture tracker_venv before the tests that use it.
set -euo pipefail
venv=$1
here=$(cd "$(dirname "$0")" && pwd)
stamp="$venv/.libtune-requirements"
if [ -x "$venv/bin/python" ] && cmp -s "$here/requirements.txt" "$stamp"; then
  echo "make_venv.sh: $venv is ready"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
cp "$here/requirements.txt" "$stamp"
echo "make_venv.sh: made $venv"
