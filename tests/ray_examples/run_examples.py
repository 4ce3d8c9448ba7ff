#!/usr/bin/env python3
"""run_examples.py: Ray Tune's own example scripts (ray/tune/examples/ of the ray wheel
from PyPI, never copied into this tree) run by libtune with only their import lines
changed, as docs/ray-tune.md tells a user to change them:

    import ray            -> import libtune as ray
    from ray... import    -> from libtune... import
    from ray.tune.examples.X import  -> from X import   (the example beside it)

Each runs as its own process (with --smoke-test where the script has that flag) in a
fresh folder, HOME there too, with a time limit; a script passes when it exits 0.

    run_examples.py --examples DIR --python PY --tune TUNE [--only a,b] [--expect FILE]
                    [--timeout 300] [--json OUT]

--expect FILE: the names (one per line, '#' comments) that must pass; the exit status
is 1 when one of them fails. Without it, every script given is expected to pass.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

_RULES = [(re.compile(r"^(\s*)import ray$", re.M), r"\1import libtune as ray"),
          (re.compile(r"^(\s*)from ray\.tune\.examples\.(\w+) import", re.M), r"\1from \2 import"),
          (re.compile(r"^(\s*)from ray(\.| import)", re.M), r"\1from libtune\2")]


def rewrite(text):
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def changed_lines(before, after):
    """Every changed line must be an import line (the test's own promise)."""
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def run_one(name, examples, python, tune, timeout, repo):
    work = tempfile.mkdtemp(prefix=f"libtune-rayex-{name}-")
    try:
        for f in os.listdir(examples):
            if f.endswith(".py"):
                with open(os.path.join(examples, f)) as src:
                    text = src.read()
                new = rewrite(text)
                for old_line, new_line in changed_lines(text, new):
                    if "import" not in new_line:
                        raise AssertionError(f"{f}: a line that is not an import changed: {old_line!r}")
                with open(os.path.join(work, f), "w") as dst:
                    dst.write(new)
        script = os.path.join(work, name + ".py")
        with open(script) as f:
            args = ["--smoke-test"] if "--smoke-test" in f.read() else []
        env = dict(os.environ, HOME=work, LIBTUNE_TUNE=tune,
                   PYTHONPATH=os.pathsep.join(p for p in [os.path.join(repo, "python"), work] if p))
        env.pop("RAY_ADDRESS", None)
        t0 = time.time()
        try:
            p = subprocess.run([python, script, *args], cwd=work, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=timeout, start_new_session=True)
            code, out = p.returncode, p.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            code, out = "timeout", (e.stdout or b"").decode(errors="replace")
        wall = time.time() - t0
        return {"name": name, "ok": code == 0, "code": code, "wall_s": round(wall, 1), "args": args,
                "tail": out.strip().splitlines()[-15:]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", required=True, help="ray/tune/examples of the ray wheel")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--tune", required=True, help="libtune's tune binary")
    p.add_argument("--only", help="comma-separated names")
    p.add_argument("--expect", help="file of the names that must pass")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    # The scripts run in folders of their own: paths given relative to here made absolute.
    a.examples, a.tune = os.path.abspath(a.examples), os.path.abspath(a.tune)
    if os.sep in a.python:
        a.python = os.path.abspath(a.python)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    expected = None
    if a.expect:
        with open(a.expect) as f:
            expected = [ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()]
    names = a.only.split(",") if a.only else expected
    if not names:
        sys.exit("run_examples.py: give --only or --expect")
    missing = [n for n in names if not os.path.exists(os.path.join(a.examples, n + ".py"))]
    if missing:
        sys.exit(f"run_examples.py: not in {a.examples}: {', '.join(missing)}")
    results = []
    for name in names:
        r = run_one(name, a.examples, a.python, a.tune, a.timeout, repo)
        results.append(r)
        how = "" if r["ok"] else f", exit {r['code']}"
        print(f"{'PASS' if r['ok'] else 'FAIL'} {name} ({r['wall_s']} s{how})", flush=True)
        if not r["ok"]:
            print("    " + "\n    ".join(r["tail"]), flush=True)
    passed = sum(r["ok"] for r in results)
    print(f"{passed} of {len(results)} examples ran to the end")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
