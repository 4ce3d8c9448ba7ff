"""The driver API (libtune.tune.Tuner, tune.run, ResultGrid, Trainable classes,
with_resources / with_parameters) on the real engine: each test runs `tune run`
(LIBTUNE_TUNE, set by ctest) on an embedded cluster of its own, with real trial
processes of this interpreter. Bad inputs are named before any trial starts.

Run from the repository root:
  LIBTUNE_TUNE=build/nodes/tune PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import contextlib
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest
import warnings

import libtune
from libtune import train, tune
from libtune.tune.schedulers import ASHAScheduler
from libtune.tune.search import ConcurrencyLimiter, OptunaSearch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_tests.py beside this file
from engine_tests import HAVE_CLOUDPICKLE, needs_engine  # noqa: E402


def quadratic(config):
    for i in range(4):
        tune.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / (i + 1), "extra": {"step": i}})


def forever(config):
    i = 0
    while True:  # ends when the stop criterion stops it: report does not return then
        i += 1
        tune.report({"score": config["x"] * i})


def talking(config):
    print("out", config["x"])
    print("err", config["x"], file=sys.stderr)
    tune.report({"score": 1})


def checkpointing(config):
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "step.txt")) as f:
                start = int(f.read())
    for step in range(start + 1, 4):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"acc": step * config["x"], "started_at": start}, checkpoint=train.Checkpoint.from_directory(d))


def raising(config):
    tune.report({"loss": 1.0})
    raise ValueError(f"lr {config['lr']} diverged")


class Counter(tune.Trainable):
    def setup(self, config, offset=0):
        self.value = config["start"] + offset

    def step(self):
        self.value += 1
        return {"value": self.value, "done": self.value >= 5}

    def save_checkpoint(self, checkpoint_dir):
        return {"value": self.value}

    def load_checkpoint(self, checkpoint):
        self.value = checkpoint["value"]


@needs_engine
class Fit(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        os.chmod(self.tmp, 0o755)
        os.environ["TUNE_SHARED_DIR"] = os.path.join(self.tmp, "shared")  # no cluster of this machine
        libtune.init(num_cpus=4)
        self.run_config = lambda **kw: tune.RunConfig(storage_path=self.tmp, verbose=0, **kw)

    def tearDown(self):
        libtune.shutdown()
        subprocess.run(["rm", "-rf", self.tmp])

    def test_a_function_trainable_and_its_result_grid(self):
        tuner = tune.Tuner(tune.with_resources(quadratic, {"cpu": 1}),
                           param_space={"x": tune.uniform(0, 1), "k": tune.grid_search([1, 2])},
                           tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=2),
                           run_config=self.run_config(name="quad"))
        grid = tuner.fit()
        self.assertEqual((len(grid), grid.num_errors, grid.num_terminated), (4, 0, 4))
        self.assertEqual(grid.experiment_path, os.path.join(self.tmp, "quad"))
        best = grid.get_best_result()
        losses = [r.metrics["loss"] for r in grid]
        self.assertEqual(best.metrics["loss"], min(losses))
        self.assertEqual(best.metrics["training_iteration"], 4)
        self.assertEqual(best.metrics["extra/step"], 3)  # nested dicts flattened as Ray's
        self.assertEqual(best.config["x"], best.metrics["config"]["x"])
        self.assertIsNone(best.checkpoint)
        self.assertEqual(grid.get_best_result("loss", "max").metrics["loss"], max(losses))
        self.assertEqual(sorted(r.config["k"] for r in grid), [1, 1, 2, 2])
        self.assertIs(tuner.get_results(), grid)
        try:
            import pandas  # noqa: F401
        except ImportError:
            return
        frame = grid.get_dataframe()
        self.assertEqual(len(frame), 4)
        self.assertIn("config/x", frame.columns)
        self.assertEqual(len(best.metrics_dataframe), 4)

    def test_a_loop_without_end_stops_at_the_stop_criterion(self):
        grid = tune.Tuner(forever, param_space={"x": 1.0},
                          tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=2),
                          run_config=self.run_config(stop={"training_iteration": 3})).fit()
        self.assertEqual(grid.num_errors, 0, grid.errors)
        self.assertEqual([r.metrics["training_iteration"] for r in grid], [3, 3])

    def test_checkpoints_come_back_and_a_restart_starts_from_one(self):
        grid = tune.Tuner(checkpointing, param_space={"x": 2},
                          tune_config=tune.TuneConfig(metric="acc", mode="max"),
                          run_config=self.run_config()).fit()
        result = grid[0]
        self.assertEqual(result.metrics["acc"], 6)
        with result.checkpoint.as_directory() as d:
            with open(os.path.join(d, "step.txt")) as f:
                self.assertEqual(f.read(), "3")
        # Every one kept (CheckpointConfig's default), the newest last, each with its own
        # result's metrics.
        kept = result.best_checkpoints
        self.assertEqual([c.iteration for c, _ in kept], [1, 2, 3])
        self.assertEqual(kept[-1][1]["acc"], 6)
        for checkpoint, metrics in kept:
            with open(os.path.join(checkpoint.path, "step.txt")) as f:
                self.assertEqual(int(f.read()) * 2, metrics["acc"])

    def test_a_checkpoint_reported_with_the_result_that_ends_the_trial_is_kept(self):
        def one_step(config):
            tune.report({"loss": config["x"]}, checkpoint=tune.Checkpoint.from_dict({"x": config["x"]}))

        grid = tune.Tuner(one_step, param_space={"x": tune.grid_search([1, 2, 3, 4, 5, 6])},
                          tune_config=tune.TuneConfig(metric="loss", mode="min", reuse_actors=False),
                          run_config=self.run_config(stop={"training_iteration": 1})).fit()
        self.assertEqual(sorted(r.checkpoint.to_dict()["x"] for r in grid if r.checkpoint), [1, 2, 3, 4, 5, 6])

    def test_fail_fast_stops_the_others(self):
        def fails_or_waits(config):
            import time
            if config["x"] == 0:
                raise RuntimeError("first")
            for i in range(100):
                time.sleep(0.1)
                tune.report({"loss": i})

        with self.assertRaises(tune.TuneError) as e:
            tune.Tuner(fails_or_waits, param_space={"x": tune.grid_search([0, 1])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=self.run_config(failure_config=tune.FailureConfig(fail_fast="raise"))).fit()
        self.assertIn("RuntimeError: first", str(e.exception))
        grid = tune.Tuner(fails_or_waits, param_space={"x": tune.grid_search([0, 1])},
                          tune_config=tune.TuneConfig(metric="loss", mode="min"),
                          run_config=self.run_config(failure_config=tune.FailureConfig(fail_fast=True))).fit()
        self.assertEqual(grid.num_errors, 1)
        self.assertLess(max(len(r._history) for r in grid), 100)  # the other did not run to its end

    def test_a_trainable_class_with_parameters(self):
        grid = tune.Tuner(tune.with_parameters(Counter, offset=1), param_space={"start": tune.grid_search([0, 2])},
                          tune_config=tune.TuneConfig(metric="value", mode="max"),
                          run_config=self.run_config(checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True))
                          ).fit()
        self.assertEqual(grid.num_errors, 0, grid.errors)
        by_start = {r.config["start"]: r for r in grid}
        self.assertEqual(by_start[0].metrics["training_iteration"], 4)  # 1 -> 5 in four steps
        self.assertEqual(by_start[2].metrics["training_iteration"], 2)
        self.assertIsNotNone(by_start[0].checkpoint)

    def test_a_raising_trainable_is_a_failed_trial_with_its_traceback(self):
        grid = tune.Tuner(raising, param_space={"lr": 0.5}, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                          run_config=self.run_config()).fit()
        self.assertEqual(grid.num_errors, 1)
        error = grid.errors[0]
        self.assertIn("ValueError: lr 0.5 diverged", str(error))
        self.assertIn("Traceback", error.traceback)
        self.assertIn("in raising", error.traceback)
        self.assertIs(grid[0].error, error)

    def test_tune_run_returns_an_experiment_analysis(self):
        analysis = tune.run(quadratic, config={"x": tune.grid_search([0.3, 0.9])}, metric="loss", mode="min",
                            storage_path=self.tmp, verbose=0, resources_per_trial={"cpu": 1})
        self.assertEqual(analysis.best_config, {"x": 0.3})
        self.assertAlmostEqual(analysis.best_result["loss"], 0.25)
        with self.assertRaises(tune.TuneError) as e:
            tune.run(raising, config={"lr": 0.1}, metric="loss", mode="min", storage_path=self.tmp, verbose=0)
        self.assertIn("ValueError: lr 0.1 diverged", str(e.exception))

    def test_ray_search_and_scheduler_names(self):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            search = ConcurrencyLimiter(OptunaSearch(), max_concurrent=2)
        self.assertTrue(any("TPE" in str(w.message) for w in said))
        grid = tune.Tuner(quadratic, param_space={"x": tune.uniform(0, 1)},
                          tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=6, search_alg=search,
                                                      scheduler=ASHAScheduler(max_t=4, grace_period=1)),
                          run_config=self.run_config()).fit()
        self.assertEqual((len(grid), grid.num_errors), (6, 0))
        with open(os.path.join(grid.experiment_path, "tuner", "experiment.json")) as f:
            experiment = json.load(f)
        self.assertEqual(experiment["search"], "tpe")
        self.assertEqual(experiment["max_concurrent_trials"], 2)
        self.assertEqual(experiment["scheduler"]["type"], "asha")

    def test_no_metric_as_ray_allows(self):
        grid = tune.Tuner(quadratic, param_space={"x": 0.5}, run_config=self.run_config()).fit()
        self.assertEqual(grid.num_errors, 0, grid.errors)
        with self.assertRaises(ValueError):
            grid.get_best_result()
        self.assertEqual(grid.get_best_result("loss", "min").metrics["training_iteration"], 4)

    def test_trials_output_comes_to_the_driver_prefixed_unless_asked_not_to(self):
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            tune.Tuner(talking, param_space={"x": tune.grid_search([1, 2])}, run_config=self.run_config()).fit()
        lines = said.getvalue().splitlines()
        for x in (1, 2):
            self.assertTrue(any(re.match(r"^\(trial-\d+ pid=\d+\) out %d$" % x, line) for line in lines), lines)
            self.assertTrue(any(re.match(r"^\(trial-\d+ pid=\d+\) err %d$" % x, line) for line in lines), lines)
        libtune.init(num_cpus=4, log_to_driver=False)
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            tune.Tuner(talking, param_space={"x": 3}, run_config=self.run_config()).fit()
        self.assertNotIn("out 3", said.getvalue())
        with self.assertRaises(TypeError):
            libtune.init(log_to_driver="no")

    def test_an_existing_experiment_is_not_overwritten(self):
        first = tune.Tuner(quadratic, param_space={"x": 0.5}, run_config=self.run_config(name="same")).fit()
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            second = tune.Tuner(quadratic, param_space={"x": 0.7}, run_config=self.run_config(name="same")).fit()
        self.assertEqual(second.experiment_path, first.experiment_path + "-2")
        self.assertIn("Tuner.restore", said.getvalue())
        self.assertEqual(tune.Tuner.restore(first.experiment_path, quadratic).get_results()[0].config, {"x": 0.5})


def stored_checkpoints(database):
    try:
        db = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute("SELECT COUNT(DISTINCT trial) FROM events WHERE kind = 'checkpoint_stored'").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


@needs_engine
class Interrupted(unittest.TestCase):
    """Ctrl-C: every trial stops, and Tuner.restore continues from the checkpoints."""

    def test_ctrl_c_then_restore(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            script = os.path.join(tmp, "driver.py")
            with open(script, "w") as f:
                f.write(textwrap.dedent("""
                    import os, sys, tempfile, time
                    import libtune
                    from libtune import tune

                    def slow(config):
                        start = 0
                        ckpt = tune.get_checkpoint()
                        if ckpt:
                            with ckpt.as_directory() as d:
                                start = int(open(os.path.join(d, "i")).read())
                        for i in range(start + 1, 21):
                            time.sleep(0.1)
                            d = tempfile.mkdtemp()
                            open(os.path.join(d, "i"), "w").write(str(i))
                            tune.report({"i": i, "start": start}, checkpoint=tune.Checkpoint.from_directory(d))

                    libtune.init(num_cpus=2)
                    path = os.path.join(sys.argv[1], "exp")
                    if tune.Tuner.can_restore(path):
                        grid = tune.Tuner.restore(path, slow).fit()
                        print("RESUMED", sorted((int(r.metrics["i"]), r.metrics["start"] > 0) for r in grid))
                    else:
                        tune.Tuner(slow, param_space={"x": tune.grid_search([1, 2])},
                                   tune_config=tune.TuneConfig(metric="i", mode="max"),
                                   run_config=tune.RunConfig(storage_path=sys.argv[1], name="exp", verbose=0)).fit()
                """))
            # TMPDIR: the trials' checkpoint folders and the embedded cluster's go there.
            scratch = os.path.join(tmp, "scratch")
            os.makedirs(scratch)
            env = dict(os.environ, TUNE_SHARED_DIR=os.path.join(tmp, "shared"), TMPDIR=scratch)
            first = subprocess.Popen([sys.executable, script, tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, start_new_session=True)
            results = os.path.join(tmp, "exp", "experiment.db")
            for _ in range(300):  # until the store has a checkpoint of each trial
                if stored_checkpoints(results) == 2:
                    break
                threading.Event().wait(0.05)
            os.killpg(first.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
            out, err = first.communicate(timeout=60)
            self.assertNotEqual(first.returncode, 0)
            self.assertIn("KeyboardInterrupt", err)
            self.assertIn("Tuner.restore", err)
            self.assertTrue(os.path.exists(results))
            left = [f for f in os.listdir(scratch) if f.startswith("libtune-embedded-")]
            self.assertEqual(left, [], "the interrupted engine left its embedded cluster's folder")
            second = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(second.returncode, 0, second.stderr)
            self.assertIn("RESUMED [(20, True), (20, True)]", second.stdout, second.stderr)


class BadInput(unittest.TestCase):
    """Named before any trial starts (no engine needed for these)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.run_config = tune.RunConfig(storage_path=self.tmp, verbose=0)

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    @unittest.skipUnless(HAVE_CLOUDPICKLE, "cloudpickle missing")
    def test_an_unpicklable_trainable_names_what_could_not_be_pickled(self):
        lock = threading.Lock()

        def uses_a_lock(config):
            with lock:
                tune.report({"loss": 1})

        with self.assertRaises(TypeError) as e:
            tune.Tuner(uses_a_lock, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=self.run_config).fit()
        self.assertIn("closure variable 'lock'", str(e.exception))
        self.assertIn("cannot be pickled", str(e.exception))
        self.assertEqual(os.listdir(self.tmp), [])  # nothing written

    def test_param_space_must_be_a_dict(self):
        with self.assertRaises(TypeError) as e:
            tune.Tuner(quadratic, param_space=[("x", 1)])
        self.assertIn("param_space", str(e.exception))

    def test_a_gpu_request_libtune_refuses_names_the_trainable(self):
        with self.assertRaises(ValueError) as e:
            tune.with_resources(quadratic, {"gpu": 1.5})
        self.assertIn("with_resources(quadratic): gpu=1.5", str(e.exception))

    def test_unknown_and_unsupported_ray_arguments_are_named(self):
        cases = [
            (lambda: tune.TuneConfig(trial_dirname_creator="x"), "trial_dirname_creator"),
            (lambda: tune.RunConfig(callbacks=[object()]), "callbacks"),
            (lambda: tune.RunConfig(sync_config=object()), "sync_config"),
            (lambda: tune.CheckpointConfig(num_to_keep=0), "num_to_keep must be a whole number of at least 1"),
            (lambda: tune.FailureConfig(fail_fast="sometimes"), "fail_fast"),
            (lambda: tune.TuneConfig(num_samples=-1), "num_samples=-1"),
            (lambda: tune.run(quadratic, keep_checkpoints_num=3), "keep_checkpoints_num"),
            (lambda: libtune.init(object_store_memory=10 ** 9), "object_store_memory"),
            (lambda: libtune.init(address="ray://head:10001"), "without a scheme"),
            (lambda: libtune.init(num_gpus=0.5), "num_gpus=0.5): give a whole number"),
            (lambda: tune.Tuner(quadratic, tune_config=tune.TuneConfig(metric="loss")).fit(), "give mode='min'"),
        ]
        for make, named in cases:
            with self.assertRaises((TypeError, ValueError), msg=named) as e:
                make()
            self.assertIn(named, str(e.exception))
        with self.assertRaises(ValueError) as e:
            tune.Tuner(quadratic, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(stop={"loss": "low"})).fit()
        self.assertIn("give a number (the trial stops once it reports loss >= it)", str(e.exception))

    def test_report_outside_a_trial(self):
        with self.assertRaises(RuntimeError) as e:
            train.report({"loss": 1})
        self.assertIn("outside a trial", str(e.exception))

    @needs_engine
    def test_an_unreachable_address_is_named(self):
        token = os.path.join(self.tmp, "token")
        with open(token, "w") as f:
            f.write("a" * 32 + "\n")
        os.chmod(token, 0o600)
        libtune.init(address="127.0.0.1:9", token_file=token)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(tune.TuneError) as e:
                    tune.Tuner(quadratic, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                               run_config=self.run_config).fit()
        finally:
            libtune.shutdown()
        self.assertIn("libtune.init(address='127.0.0.1:9'): cannot reach a libtune head at 127.0.0.1:9", str(e.exception))


if __name__ == "__main__":
    unittest.main()
