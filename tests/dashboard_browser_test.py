#!/usr/bin/env python3
"""The head's dashboard in a real browser: headless Chromium (Debian's), driven through
Selenium, against a live cluster on loopback (a head, two nodes with logical GPUs, and
the Fashion-MNIST tuning script running trials on them).

Every page is loaded; each must show what the cluster really has (the node ids, GPU
UUIDs, placement groups and trials that `tune status` and the JSON API report), the
learning-curve plot must gain points while the page is open, and the browser's console
must stay free of errors. A screenshot of each page goes to --screenshots.

Exits 77 (ctest: skipped) when Chromium, chromedriver or Selenium is missing.
"""
import argparse
import json
import ssl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def log(*a):
    print("[dashboard-test]", *a, flush=True)


class Cluster:
    def __init__(self, tune, work):
        self.tune = tune
        self.work = work
        self.env = dict(os.environ, TUNE_RUNTIME_DIR=os.path.join(work, "rt"))
        os.makedirs(self.env["TUNE_RUNTIME_DIR"], mode=0o700)
        self.token_file = os.path.join(work, "token")
        self.program = None

    def run(self, *args):
        r = subprocess.run([self.tune, *args, "--token-file", self.token_file], env=self.env,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"tune {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r.stdout

    def start(self, nodes, tls=False):
        self.ssl = None
        if tls:  # every process of the cluster (the tune commands, the program) reads these
            d = os.path.join(self.work, "tls")
            subprocess.run([self.tune, "tls", "init", d], check=True, capture_output=True)
            self.env.update(TUNE_TLS_CERT=d + "/cluster.crt", TUNE_TLS_KEY=d + "/cluster.key", TUNE_TLS_CA=d + "/ca.crt")
            self.ssl = ssl.create_default_context(cafile=d + "/ca.crt")
        out = self.run("start", "--head", "--host", "127.0.0.1", "--port", "0", "--dashboard-port", "0")
        self.address = re.search(r"head started at (\S+)", out).group(1)
        self.dashboard = re.search(r"dashboard:\s+(https?://\S+)", out).group(1)
        assert self.dashboard.startswith("https://" if tls else "http://"), self.dashboard
        for _ in range(nodes):
            self.run("start", "--address", self.address, "--num-gpus", "2", "--num-cpus", "2")
        with open(self.token_file) as f:
            self.token = f.readline().strip()

    def api(self, path):
        req = urllib.request.Request(self.dashboard.rstrip("/") + path,
                                     headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=10, context=self.ssl) as r:
            return json.load(r)

    def stop_program(self):
        if self.program and self.program.poll() is None:
            self.program.send_signal(signal.SIGINT)
            try:
                self.program.wait(20)
            except subprocess.TimeoutExpired:
                self.program.kill()
                self.program.wait()

    def stop(self):
        self.stop_program()
        subprocess.run([self.tune, "stop"], env=self.env, capture_output=True, timeout=60)


# acc peaks at x = 0.7 and ms grows with x: the front is x in [0, 0.7]; over = x - LIMIT
# (the second argument) is met below LIMIT only.
TWO_PY = """import sys, time
x, limit = float(sys.argv[1]), float(sys.argv[2])
for i in range(1, 11):
    acc = (1 - (x - 0.7) ** 2) * (1 - 0.5 ** i)
    print(f"it={i} acc={acc:.6f} ms={10 + 40 * x:.4f} over={x - limit:.4f}", flush=True)
    time.sleep(0.05)
"""
TWO_YAML = """name: two
command: [python3, two.py, "${x}", "0.8"]
metric_pattern: 'it=(?P<iteration>\\d+) acc=(?P<acc>\\S+) ms=(?P<ms>\\S+) over=(?P<over>\\S+)'
metrics: {acc: max, ms: min}
constraints: [over]
space: {x: {uniform: [0, 1]}}
search: random
num_samples: 12
resources_per_trial: {cpu: 1}
progress: none
"""


# One objective and a constraint the best acc (x near 0.7) does not meet (x <= 0.5): the
# plot is acc against over, and the best shown must be a feasible trial.
ONE_YAML = (TWO_YAML.replace("name: two", "name: one").replace("metrics: {acc: max, ms: min}", "metric: acc")
            .replace('"0.8"]', '"0.5"]'))


def run_file(cluster, work, name, yaml):
    """`tune run NAME.yaml` (running two.py) on the cluster, in the background."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    for file, text in (("two.py", TWO_PY), (name + ".yaml", yaml)):
        with open(os.path.join(folder, file), "w") as f:
            f.write(text)
    return subprocess.Popen([cluster.tune, "run", name + ".yaml", "--address", cluster.address,
                             "--token-file", cluster.token_file, "--experiment-dir", os.path.join(work, name + "-exp")],
                            cwd=folder, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished_front(cluster, name, trials):
    """The experiment NAME once it is done with `trials` trials in its front's view."""
    def ready():
        for e in cluster.api("/api/experiments"):
            if e.get("name") == name and e["state"] == "done":
                p = cluster.api(f"/api/experiments/{e['id']}").get("pareto")
                if p and len(p["trials"]) == trials:
                    return e, p
        return None
    return wait_for(f"{name}: {trials} trials in the front's view", ready, timeout=120)


def wait_for(what, check, timeout=60, every=0.25):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the page or the API is not there yet
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tune", required=True, help="the tune program")
    ap.add_argument("--program", required=True, help="the tuning script (examples/fashion_mnist)")
    ap.add_argument("--screenshots", help="folder for a screenshot of each page")
    ap.add_argument("--settle", type=float, default=0,
                    help="seconds to let the experiment run before its own page (longer curves, for docs/)")
    ap.add_argument("--tls", action="store_true", help="the cluster with TLS: the dashboard over HTTPS")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = ap.parse_args()

    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        log("skipped: Selenium is not installed (deploy/install-deps.sh installs python3-selenium)")
        return SKIP
    for exe in (args.chromium, args.chromedriver):
        if not os.access(exe, os.X_OK):
            log(f"skipped: {exe} is missing (deploy/install-deps.sh installs chromium and chromium-driver)")
            return SKIP

    work = tempfile.mkdtemp(prefix="tune-dashboard-")

    os.chmod(work, 0o711)  # a root node runs trials as nobody, in folders below it
    cluster = Cluster(args.tune, work)
    driver = None
    try:
        cluster.start(nodes=2, tls=args.tls)
        log("cluster at", cluster.address, "dashboard at", cluster.dashboard)
        cluster.program = subprocess.Popen(
            [args.program, "--address", cluster.address, "--token-file", cluster.token_file,
             "--samples", "8", "--epochs", "8", "--gpus-per-trial", "0.5", "--cpus-per-trial", "1",
             "--progress", "none", "--experiment-dir", os.path.join(work, "experiment")],
            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        exp = wait_for("trials running with results",
                       lambda: next((e for e in cluster.api("/api/experiments")
                                     if e["trials_by_state"].get("running", 0) >= 2 and e["results"] > 0), None),
                       timeout=90)
        log("experiment", exp["id"], "is running")

        opts = webdriver.ChromeOptions()
        opts.binary_location = args.chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1400,1100", "--hide-scrollbars"):
            opts.add_argument(a)
        if args.tls:  # the test's own CA, unknown to this browser: its certificate is checked by urllib above
            opts.add_argument("--ignore-certificate-errors")
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        # TMPDIR: Chromium's profile and its singleton's socket folder (org.chromium.Chromium.*,
        # which it can leave behind) go into the work folder, removed at the end.
        browser_tmp = os.path.join(work, "browser-tmp")
        os.makedirs(browser_tmp)
        service = Service(args.chromedriver, env=dict(os.environ, TMPDIR=browser_tmp))
        driver = webdriver.Chrome(service=service, options=opts)
        driver.set_page_load_timeout(30)

        def load(hash_, name):
            driver.get(cluster.dashboard.rstrip("/") + "/" + hash_)
            body = lambda: driver.find_element(By.TAG_NAME, "body")
            wait_for(f"the {name} page to load", lambda: body().get_attribute("data-route") == hash_)
            return driver.page_source

        def shot(name):
            if args.screenshots:
                os.makedirs(args.screenshots, exist_ok=True)
                driver.save_screenshot(os.path.join(args.screenshots, f"dashboard-{name}.png"))

        # Sign in the way `tune dashboard` does: the token in the address, once.
        driver.get(cluster.dashboard + "?token=" + cluster.token)
        assert "token=" not in driver.current_url, f"the token stayed in the address: {driver.current_url}"
        cookies = {c["name"]: c for c in driver.get_cookies()}
        assert "tune_token" in cookies, cookies
        assert cookies["tune_token"]["httpOnly"], cookies
        assert cookies["tune_token"].get("secure", False) == args.tls, f"Secure only over HTTPS: {cookies}"

        # Cluster: every node and GPU the head reports, and the trials holding GPUs.
        status = json.loads(cluster.run("status", "--address", cluster.address, "--json"))
        page = load("#/", "cluster")
        nodes = [n["id"] for n in status["nodes"]]
        assert len(nodes) == 2, status
        for n in nodes:
            assert n in page, f"node {n} is not on the cluster page"
        gpus = cluster.api("/api/gpus")
        assert len(gpus) == 4, gpus
        for g in gpus:
            assert f'data-gpu="{g["uuid"]}"' in page, f"GPU {g['uuid']} is not on the cluster page"
        held = wait_for("a GPU held by a running trial on the page",
                        lambda: [t for t in re.findall(r"trials/(trial-\d+)", driver.page_source)])
        log("GPUs held by", sorted(set(held)))
        shot("cluster")

        page = load("#/groups", "placement groups")
        groups = [g["id"] for g in cluster.api("/api/groups") if g["state"] == "created"]
        assert groups, "no placement group placed"
        assert any(g in page for g in groups), f"none of the groups {groups} is on the groups page"
        shot("groups")

        page = load("#/experiments", "experiments")
        assert exp["id"] in page and "fashion_mnist" in page
        shot("experiments")

        # The experiment: its trials and a plot that grows while the page is open.
        time.sleep(args.settle)  # longer curves for the screenshots
        load(f"#/experiments/{exp['id']}", "experiment")
        detail = cluster.api(f"/api/experiments/{exp['id']}")
        # The page refreshes on its own: a trial that started after it loaded shows up
        # at its next refresh.
        for t in detail["trial_table"]:
            wait_for(f"trial {t['id']} in the trial table", lambda: t["id"] in driver.page_source, timeout=15)
        canvas_points = lambda: int(driver.find_element(By.ID, "curves").get_attribute("data-points") or 0)
        first = wait_for("points on the plot", canvas_points)
        grown = wait_for("the plot to gain points", lambda: canvas_points() > first and canvas_points(), timeout=60)
        log(f"plot: {first} points, then {grown}")
        shot("experiment")

        # A trial's page (a running one if any still runs): its config, node, PID and GPUs.
        def started():
            rows = [t for t in cluster.api(f"/api/experiments/{exp['id']}")["trial_table"] if "pid" in t]
            return next((t for t in rows if t["state"] == "running"), rows[0] if rows else None)
        running = wait_for("a trial that started", started)
        page = load(f"#/experiments/{exp['id']}/trials/{running['id']}", "trial")
        for text in (running["id"], running["node"], str(running["pid"]), "lr", "batch_size"):
            assert text in page, f"{text} is not on the trial page"
        for g in running.get("gpus", []):
            assert g["uuid"] in page, f"GPU {g['uuid']} of {running['id']} is not on its page"
        wait_for("the trial's plot", lambda: int(driver.find_element(By.ID, "curves").get_attribute("data-points") or 0) > 0)
        shot("trial")

        # Two objectives and a constraint (`tune run` with an experiment file): the
        # experiment's page plots the Pareto front the head computes, every trial that
        # reported both objectives on it, the front's trials filled and listed, the
        # infeasible ones marked.
        cluster.stop_program()
        cluster.program = run_file(cluster, work, "two", TWO_YAML)
        two, front = finished_front(cluster, "two", 12)
        page = load(f"#/experiments/{two['id']}", "two-objective experiment")
        assert "Pareto front: acc (max) × ms (min)" in page and "over ≤ 0" in page, "no front's heading"
        canvas = lambda key: int(driver.find_element(By.ID, "front").get_attribute("data-" + key) or -1)
        wait_for("the front on the plot", lambda: canvas("points") == 12)
        on_front = [t["trial"] for t in front["trials"] if t["front"]]
        infeasible = [t["trial"] for t in front["trials"] if not t["feasible"]]
        assert on_front and infeasible, f"want trials on the front and over the constraint: {front}"
        assert canvas("front") == len(on_front) == front["front_size"], (canvas("front"), front)
        assert canvas("infeasible") == len(infeasible), (canvas("infeasible"), infeasible)
        assert driver.find_element(By.ID, "front-size").text == str(len(on_front))
        for t in on_front:
            assert f"trials/{t}" in page, f"{t} is on the front but not in the front's table"
        for t in front["trials"]:  # the head's front: feasible, and no feasible trial beats it
            x = t["values"]
            if t["front"]:
                assert t["feasible"] and not any(
                    o["feasible"] and o["values"][0] >= x[0] and o["values"][1] <= x[1] and o["values"] != x
                    for o in front["trials"]), f"{t} is dominated"
        log(f"Pareto front: {len(on_front)} of 12 trials on it, {len(infeasible)} over the constraint")
        shot("pareto")

        # One objective and a constraint: the objective against the constraint, the best
        # trial one that meets it.
        cluster.stop_program()
        cluster.program = run_file(cluster, work, "one", ONE_YAML)
        one, front = finished_front(cluster, "one", 12)
        load(f"#/experiments/{one['id']}", "constrained experiment")
        wait_for("the constrained trials on the plot", lambda: canvas("points") == 12)
        infeasible = [t["trial"] for t in front["trials"] if not t["feasible"]]
        assert canvas("infeasible") == len(infeasible) and infeasible, (canvas("infeasible"), front)
        best_any = max(front["trials"], key=lambda t: t["values"][0])
        assert not best_any["feasible"], f"want the highest acc over the constraint, to test the best: {front}"
        assert one["best"]["trial"] not in infeasible, f"the best, {one['best']}, is over its constraint"
        assert front["front_size"] >= 1 and all(t["feasible"] for t in front["trials"] if t["front"]), front
        log(f"one objective and a constraint: best {one['best']['trial']}, {len(infeasible)} of 12 over")
        shot("constrained")

        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not errors, f"console errors: {errors}"
        log("all pages loaded, no console errors")
        return 0
    except Exception as e:
        log("FAILED:", e)
        if driver:
            try:
                log("console:", driver.get_log("browser"))
            except Exception:
                pass
        return 1
    finally:
        if driver:
            driver.quit()
        cluster.stop()
        if cluster.program:
            out = cluster.program.stdout.read() if cluster.program.stdout else ""
            if out:
                log("tuning script output (tail):", out[-1500:])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
