"""The driver killed mid-run (SIGKILL: no Python code of it runs again), then
Tuner.restore(path, trainable).fit() in a new process with the same hooks: every trial
stops within seconds and nothing is left running; the restore continues the running
trials from their checkpoints and the searcher from its saved state, so every
configuration runs once and no trial starts over.

Run from the repository root:
  LIBTUNE_TUNE=build/nodes/tune PYTHONPATH=python python3 -m unittest python/tests/test_driver_killed.py -v
"""

import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_tests.py beside this file
from engine_tests import needs_engine  # noqa: E402

DRIVER = textwrap.dedent('''
    import json, os, sys, tempfile, time
    import libtune
    from libtune import tune
    from libtune.tune.search import Searcher

    class Counting(Searcher):
        """a = 1, 2, ... 6: a restarted searcher would suggest 1 again."""
        def __init__(self):
            super().__init__(metric="score", mode="max")
            self.n = 0

        def suggest(self, trial_id):
            if self.n >= 6:
                return Searcher.FINISHED
            self.n += 1
            return {"a": float(self.n)}

    def slow(config):
        start = 0
        ckpt = tune.get_checkpoint()
        if ckpt:
            with ckpt.as_directory() as d:
                with open(os.path.join(d, "i")) as f:
                    start = int(f.read())
        with open(os.path.join(PIDS, str(os.getpid())), "w") as f:
            f.write(str(start))
        for i in range(start, 15):
            time.sleep(0.25)
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "i"), "w") as f:
                    f.write(str(i + 1))
                tune.report({"score": config["a"] * (i + 1)}, checkpoint=tune.Checkpoint.from_directory(d))

    mode, storage = sys.argv[1], sys.argv[2]
    PIDS = os.path.join(storage, "pids")  # the trials' own record (the trials get no variable of this test)
    libtune.init(num_cpus=2, log_to_driver=False)
    if mode == "fit":
        tune.Tuner(slow, tune_config=tune.TuneConfig(search_alg=Counting(), num_samples=6, max_concurrent_trials=2),
                   run_config=tune.RunConfig(storage_path=storage, name="killed", verbose=0)).fit()
    else:
        grid = tune.Tuner.restore(os.path.join(storage, "killed"), slow).fit()
        print(json.dumps({"configs": sorted(r.config["a"] for r in grid), "errors": grid.num_errors}))
''')


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _processes_naming(text):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return out


@needs_engine
class DriverKilled(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="libtune-killed-")
        os.chmod(self.tmp, 0o755)
        self.pids = os.path.join(self.tmp, "pids")
        os.mkdir(self.pids)
        self.script = os.path.join(self.tmp, "driver.py")
        with open(self.script, "w") as f:
            f.write(DRIVER)
        self.scratch = os.path.join(self.tmp, "scratch")  # TMPDIR: where tune run's embedded cluster works
        os.mkdir(self.scratch)
        self.env = dict(os.environ, HOME=self.tmp, TMPDIR=self.scratch)

    def tearDown(self):
        for pid in _processes_naming(self.tmp):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", self.tmp])

    def saved_and_created(self, exp):
        """(the searcher's n in the hooks' saved state, the trials in the store)."""
        try:
            with open(os.path.join(exp, "tuner", "hooks.pkl"), "rb") as f:
                n = pickle.load(f)["searcher"].n
            db = sqlite3.connect(f"file:{exp}/experiment.db?mode=ro", uri=True, timeout=1)
            try:
                created = db.execute("SELECT count(*) FROM trials").fetchone()[0]
            finally:
                db.close()
            return n, created
        except Exception:
            return None, None

    def test_trials_stop_and_restore_continues_with_the_searchers_state(self):
        exp = os.path.join(self.tmp, "killed")
        driver = subprocess.Popen([sys.executable, self.script, "fit", self.tmp], env=self.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 90
        while time.time() < deadline:  # the hooks' state saved (every 10 s) with every trial made so far
            n, created = self.saved_and_created(exp)
            if n is not None and n >= 3 and n == created:
                break
            self.assertIsNone(driver.poll(), driver.stderr.read().decode() if driver.poll() is not None else "")
            time.sleep(0.1)
        else:
            driver.kill()
            self.fail("the searcher's state was never saved with 3 trials or more")
        trial_pids = [int(p) for p in os.listdir(self.pids)]
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        driver.stderr.close()
        killed_at = time.time()
        while time.time() - killed_at < 10 and (any(_alive(p) for p in trial_pids) or _processes_naming(self.tmp)
                                                 or os.listdir(self.scratch)):
            time.sleep(0.1)
        self.assertFalse([p for p in trial_pids if _alive(p)], "trials left running after the driver was killed")
        self.assertFalse(_processes_naming(self.tmp), "processes of the experiment left running")
        # tune run ended as it should (not by a SIGPIPE on its output to the dead driver):
        # its embedded cluster's folder is gone.
        self.assertEqual(os.listdir(self.scratch), [])
        stopped_s = time.time() - killed_at

        before = set(os.listdir(self.pids))
        out = subprocess.run([sys.executable, self.script, "restore", self.tmp], env=self.env, capture_output=True,
                             timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr.decode()[-3000:])
        got = json.loads(out.stdout.decode().strip().splitlines()[-1])
        self.assertEqual(got["errors"], 0, out.stderr.decode()[-3000:])
        self.assertEqual(got["configs"], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "each configuration once: the searcher "
                                                                           "went on from its saved state")
        starts = []
        for p in set(os.listdir(self.pids)) - before:
            with open(os.path.join(self.pids, p)) as f:
                starts.append(int(f.read()))
        self.assertTrue(any(s > 0 for s in starts), f"no restored trial went on from its checkpoint: {starts}")
        db = sqlite3.connect(os.path.join(exp, "experiment.db"))
        rows = db.execute("SELECT trial, count(*), max(iteration) FROM results GROUP BY trial").fetchall()
        db.close()
        self.assertEqual(len(rows), 6)
        self.assertTrue(all(count == 15 and top == 15 for _, count, top in rows), rows)
        self.assertLess(stopped_s, 10)


if __name__ == "__main__":
    unittest.main()
