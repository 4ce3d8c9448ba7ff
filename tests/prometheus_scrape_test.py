#!/usr/bin/env python3
"""The head's /metrics scraped by a real Prometheus server (Debian's prometheus), configured
as docs/dashboard.md says: the cluster token as a bearer credential from a file. The
scrape must succeed (`up` is 1) and the cluster's numbers must be queryable: nodes alive,
GPUs, the placement-group latency histogram. A scrape without the token must fail.

Exits 77 (ctest: skipped) without the prometheus program. Everything on loopback.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP = 77


def log(*a):
    print("[prometheus-test]", *a, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    return {tuple(sorted(x["metric"].items())): float(x["value"][1]) for x in body["data"]["result"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tune", required=True)
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    args = ap.parse_args()
    if not os.access(args.prometheus, os.X_OK):
        log(f"skipped: {args.prometheus} is missing (deploy/install-deps.sh installs prometheus)")
        return SKIP

    work = tempfile.mkdtemp(prefix="tune-prometheus-")

    os.chmod(work, 0o711)  # a root node runs trials as nobody, in folders below it
    env = dict(os.environ, TUNE_RUNTIME_DIR=os.path.join(work, "rt"))
    os.makedirs(env["TUNE_RUNTIME_DIR"], mode=0o700)
    token_file = os.path.join(work, "token")
    tune = lambda *a: subprocess.run([args.tune, *a, "--token-file", token_file], env=env, capture_output=True,
                                     text=True, timeout=60)
    prom = None
    try:
        out = tune("start", "--head", "--host", "127.0.0.1", "--port", "0", "--dashboard-port", "0").stdout
        address = re.search(r"head started at (\S+)", out).group(1)
        dash = re.search(r"dashboard:\s+http://(\S+?)/", out).group(1)
        r = tune("start", "--address", address, "--num-gpus", "2", "--num-cpus", "2")
        assert r.returncode == 0, r.stderr
        # A placement group, so that the latency histogram has an observation.
        r = tune("group", "create", "--address", address, "--bundles", '[{"gpu": 0.5}]', "--wait", "5")
        assert r.returncode == 0, r.stdout + r.stderr

        port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: libtune
    authorization:
      credentials_file: {token_file}
    static_configs:
      - targets: ["{dash}"]
  - job_name: no-token
    static_configs:
      - targets: ["{dash}"]
""")
        prom = subprocess.Popen([args.prometheus, f"--config.file={config}", f"--storage.tsdb.path={work}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))
        deadline = time.time() + 60
        up = {}
        while time.time() < deadline:
            try:
                up = {dict(k)["job"]: v for k, v in query(port, "up").items()}
                if up.get("libtune") == 1 and "no-token" in up:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        assert up.get("libtune") == 1, f"Prometheus did not scrape the head with the token: up = {up}"
        assert up.get("no-token") == 0, f"a scrape without the token succeeded: up = {up}"
        log("ok: scraped with the token (up 1); without it refused (up 0)")
        nodes = query(port, "libtune_nodes_alive")
        assert list(nodes.values()) == [1.0], nodes
        gpus = query(port, "libtune_gpus_allocated")
        assert list(gpus.values()) == [0.5], gpus
        count = query(port, "libtune_placement_group_latency_seconds_count")
        assert list(count.values()) == [1.0], count
        log("ok: libtune_nodes_alive 1, libtune_gpus_allocated 0.5, one placement-group latency observed")
        return 0
    except Exception as e:
        log("FAILED:", e)
        try:
            with open(os.path.join(work, "prometheus.log")) as f:
                log("prometheus log (tail):", f.read()[-2000:])
        except OSError:
            pass
        return 1
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
        subprocess.run([args.tune, "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
