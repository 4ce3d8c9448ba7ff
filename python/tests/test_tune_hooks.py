"""User code in the engine's decisions (docs/hooks.md), through the real engine: each
test runs `tune run` (LIBTUNE_TUNE) with this process as its driver, answering over the
socket: callbacks, stoppers, sample_from, objects in param_space, a searcher and a
scheduler of the user's, PBT's functions, per-trial resources, and what a failing hook
does to the experiment.

Run from the repository root:
  LIBTUNE_TUNE=build/nodes/tune PYTHONPATH=python python3 -m unittest python/tests/test_tune_hooks.py -v
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import unittest

import libtune
from libtune import tune
from libtune.tune import Callback, Stopper
from libtune.tune.logger import CSVLoggerCallback, LoggerCallback
from libtune.tune.result import SHOULD_CHECKPOINT
from libtune.tune.schedulers import PopulationBasedTraining, TrialScheduler
from libtune.tune.search import ConcurrencyLimiter, Searcher

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_tests.py beside this file
from engine_tests import needs_engine  # noqa: E402


def steps(config):
    for i in range(config.get("n", 6)):
        time.sleep(config.get("sleep", 0.05))
        tune.report({"score": (i + 1) * config["a"]})


class Recorder(Callback):
    def __init__(self):
        self.events = []
        self.results = 0

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info):
        self.events.append(("setup", num_samples))

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.append(("start", trial.trial_id))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.results += 1
        assert result["trial_id"] == trial.trial_id and "training_iteration" in result

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.append(("complete", trial.trial_id))

    def on_experiment_end(self, trials, **info):
        self.events.append(("end", len(trials)))


class Lines(LoggerCallback):
    def __init__(self, path):
        self.path = path

    def log_trial_result(self, iteration, trial, result):
        with open(self.path, "a") as f:
            f.write(f"{trial} {result['training_iteration']}\n")


class AtScore(Stopper):
    def __init__(self, at):
        self.at = at
        self.seen = 0

    def __call__(self, trial_id, result):
        self.seen += 1
        return result["score"] >= self.at

    def stop_all(self):
        return False


class Counting(Searcher):
    """Suggests a = 1, 2, 3, then is finished; counts what it was told."""

    def __init__(self):
        super().__init__(metric="score", mode="max")
        self.next = 1
        self.completed = []

    def suggest(self, trial_id):
        if self.next > 3:
            return Searcher.FINISHED
        self.next += 1
        return {"a": float(self.next - 1), "n": 3}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result["score"] if result else None, error))


class StopOdd(TrialScheduler):
    def on_trial_result(self, tune_controller, trial, result):
        if trial.config["a"] == 1 and result["training_iteration"] >= 2:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE


class Checkpointed(tune.Trainable):
    def setup(self, config):
        self.i = 0

    def step(self):
        time.sleep(0.1)
        self.i += 1
        return {"score": self.i}

    def save_checkpoint(self, folder):
        with open(os.path.join(folder, "i"), "w") as f:
            f.write(str(self.i))


class AskCheckpoint(Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == 3:
            result[SHOULD_CHECKPOINT] = True


class Raising(Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        raise KeyError("boom in the callback")


class Hooks(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        os.chmod(self.tmp, 0o755)
        os.environ["TUNE_SHARED_DIR"] = os.path.join(self.tmp, "shared")
        libtune.init(num_cpus=4)
        self.rc = lambda **kw: tune.RunConfig(storage_path=self.tmp, verbose=0, **kw)

    def tearDown(self):
        libtune.shutdown()
        subprocess.run(["rm", "-rf", self.tmp])

    @needs_engine
    def test_callbacks_see_every_event_and_a_stopper_stops(self):
        rec, lines = Recorder(), os.path.join(self.tmp, "lines.txt")
        stopper = AtScore(3)
        grid = tune.Tuner(steps, param_space={"a": tune.grid_search([1.0, 2.0])},
                          tune_config=tune.TuneConfig(metric="score", mode="max"),
                          run_config=self.rc(name="cb", stop=stopper,
                                             callbacks=[rec, Lines(lines), CSVLoggerCallback()])).fit()
        self.assertEqual(rec.events[0], ("setup", 1))
        self.assertEqual(rec.events[-1], ("end", 2))
        self.assertEqual(sorted(e for e in rec.events if e[0] == "complete"),
                         sorted(("complete", r.metrics["trial_id"]) for r in grid))
        self.assertGreaterEqual(rec.results, 4)
        for r in grid:  # stopped at score >= 3, not at the end (6 steps of 50 ms)
            self.assertLess(r.metrics["training_iteration"], 6, r.metrics)
        with open(lines) as f:
            self.assertIn("steps_trial-0000", f.read())

    @needs_engine
    def test_a_dict_stop_on_another_metric_is_at_least_as_ray(self):
        grid = tune.Tuner(steps, param_space={"a": 1.0, "n": 20, "sleep": 0.01},
                          tune_config=tune.TuneConfig(metric="score", mode="min"),
                          run_config=self.rc(name="dict", stop={"score": 4})).fit()
        self.assertEqual(grid[0].metrics["score"], 4.0)

    @needs_engine
    def test_sample_from_lambdas_and_objects_in_the_space(self):
        seen = os.path.join(self.tmp, "seen.txt")

        def train(config):
            with open(seen, "a") as f:
                f.write(f"{config['b'] == config['a'] * 2} {type(config['ns']).__name__} {config['ns'].lr} "
                        f"{config['c']}\n")
            tune.report({"score": config["b"]})

        space = {"a": tune.uniform(1, 2), "b": tune.sample_from(lambda spec: spec.config.a * 2),
                 "c": lambda spec: 2 ** 3, "ns": argparse.Namespace(lr=0.5)}
        tune.Tuner(tune.with_parameters(train), param_space=space,
                   tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=3),
                   run_config=self.rc(name="sf")).fit()
        with open(seen) as f:
            self.assertEqual(f.read().splitlines(), ["True Namespace 0.5 8"] * 3)

    @needs_engine
    def test_progress_shows_a_sample_from_value_not_its_placeholder(self):
        # Each trial's configuration on the progress lines is the one it runs with: the
        # driver's sample_from value, never the placeholder that stands for it meanwhile.
        script = os.path.join(self.tmp, "sf_progress.py")
        with open(script, "w") as f:
            f.write("import libtune\nfrom libtune import tune\n"
                    "import time\n"
                    "def train(config):\n    time.sleep(1.5)\n    tune.report({'score': config['b']})\n"
                    "libtune.init(num_cpus=2)\n"
                    "tune.Tuner(train, param_space={'b': tune.sample_from(lambda spec: 7 + 1)},\n"
                    "           tune_config=tune.TuneConfig(metric='score', mode='max', num_samples=3),\n"
                    f"           run_config=tune.RunConfig(storage_path={self.tmp!r}, name='sfp', verbose=1)).fit()\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        self.assertNotIn("__libtune_sample_from__", out.stderr)
        self.assertIn("(b=8)", out.stderr)

    @needs_engine
    def test_a_searcher_and_a_scheduler_of_the_users(self):
        searcher = Counting()
        grid = tune.Tuner(steps, tune_config=tune.TuneConfig(search_alg=ConcurrencyLimiter(searcher, 2),
                                                             scheduler=StopOdd(), num_samples=10),
                          run_config=self.rc(name="searcher")).fit()
        self.assertEqual(sorted(r.config["a"] for r in grid), [1.0, 2.0, 3.0])
        by_a = {r.config["a"]: r.metrics["training_iteration"] for r in grid}
        self.assertEqual(by_a[3.0], 3)
        self.assertLess(by_a[1.0], 3)

    @needs_engine
    def test_pbt_draws_with_the_users_function(self):
        drawn = os.path.join(self.tmp, "drawn.txt")

        def draw():
            with open(drawn, "a") as f:
                f.write("x\n")
            return 0.123

        scratch = self.tmp  # a stop's SIGTERM may come while a folder is made or removed

        def forever(config):  # ends at the stop (8 iterations); restored trials go on from their donor's
            for i in range(1000):
                time.sleep(0.05)
                with tempfile.TemporaryDirectory(dir=scratch) as d:
                    with open(os.path.join(d, "weights"), "wb") as f:  # copies that take a moment
                        f.write(b"w" * (8 << 20))
                    tune.report({"score": config["a"] * (i + 1)}, checkpoint=tune.Checkpoint.from_directory(d))

        pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                      resample_probability=1.0, hyperparam_mutations={"a": draw},
                                      custom_explore_fn=lambda c: dict(c, explored=True))
        grid = tune.Tuner(forever, param_space={"a": tune.grid_search([0.5, 1.0, 2.0, 4.0])},
                          tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
                          run_config=self.rc(name="pbt", stop={"training_iteration": 8})).fit()
        self.assertTrue(os.path.exists(drawn), "the mutation's function was never called")
        import json
        import sqlite3
        db = sqlite3.connect(os.path.join(grid.experiment_path, "experiment.db"))
        exploits = [json.loads(b)["config"] for (b,) in db.execute("SELECT body FROM events WHERE kind = 'exploit'")]
        kinds = dict(db.execute("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
        db.close()
        self.assertTrue(exploits, "PBT never exploited")
        # A trial started again after an exploit keeps its folder's access secret: the
        # copies of checkpoints it reported before are still allowed (they were refused).
        self.assertNotIn("checkpoint_copy_failed", kinds, kinds)
        # An exploited trial's Result has the configuration it ran with last (Ray's).
        last = [r.config for r in grid if r.config.get("explored")]
        self.assertTrue(last and all(c["a"] == 0.123 for c in last), [r.config for r in grid])
        self.assertEqual(kinds.get("checkpoint_stored"), kinds.get("checkpoint"), kinds)
        self.assertTrue(all(c.get("explored") and c["a"] == 0.123 for c in exploits), exploits)

    @needs_engine
    def test_resources_by_function_and_a_bad_request_is_that_trials_error(self):
        def resources(config):
            return {"cpu": 1, "gpu": 1.5} if config["a"] > 1.5 else {"cpu": 2}

        grid = tune.Tuner(tune.with_resources(steps, resources), param_space={"a": tune.grid_search([1.0, 2.0])},
                          tune_config=tune.TuneConfig(metric="score", mode="max"),
                          run_config=self.rc(name="res")).fit()
        errors = [str(e) for e in grid.errors]
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("gpu=1.5", errors[0])

    @needs_engine
    def test_should_checkpoint_from_a_callback_makes_a_checkpoint(self):
        grid = tune.Tuner(Checkpointed, tune_config=tune.TuneConfig(metric="score", mode="max"),
                          run_config=self.rc(name="ckpt", stop={"training_iteration": 6},
                                             callbacks=[AskCheckpoint()])).fit()
        ckpt = grid[0].checkpoint
        self.assertIsNotNone(ckpt, "the callback's should_checkpoint made no checkpoint")
        with open(os.path.join(ckpt.path, "i")) as f:
            self.assertGreaterEqual(int(f.read()), 3)

    @needs_engine
    def test_a_raising_callback_ends_the_experiment_with_its_exception(self):
        started = time.time()
        with self.assertRaises(KeyError) as caught:
            tune.Tuner(steps, param_space={"a": 1.0, "n": 200},
                       tune_config=tune.TuneConfig(metric="score", mode="max"),
                       run_config=self.rc(name="raise", callbacks=[Raising()])).fit()
        self.assertIn("boom in the callback", str(caught.exception))
        notes = " ".join(getattr(caught.exception, "__notes__", []))
        self.assertIn("Raising.on_trial_result", notes)
        self.assertLess(time.time() - started, 8, "the trial (200 x 50 ms) should have been stopped")

    @needs_engine
    def test_a_hung_stopper_is_named_after_the_timeout_and_the_trials_stop(self):
        class Hangs(Stopper):
            def __call__(self, trial_id, result):
                if result["training_iteration"] == 2:
                    time.sleep(60)
                return False

            def stop_all(self):
                return False

        started = time.time()
        os.environ["LIBTUNE_HOOK_TIMEOUT_S"] = "1"
        try:
            with self.assertRaises(TimeoutError) as caught:
                tune.Tuner(steps, param_space={"a": 1.0, "n": 400},
                           tune_config=tune.TuneConfig(metric="score", mode="max"),
                           run_config=self.rc(name="hang", stop=Hangs())).fit()
        finally:
            del os.environ["LIBTUNE_HOOK_TIMEOUT_S"]
        self.assertIn("Stopper Hangs did not return within 1 s", str(caught.exception))
        self.assertLess(time.time() - started, 12, "the hook's timeout should have ended it (the trial: 20 s)")


class BadInput(unittest.TestCase):
    def test_a_callback_that_is_not_one_is_named(self):
        with self.assertRaises(TypeError) as caught:
            tune.RunConfig(callbacks=[object()])
        self.assertIn("tune.Callback", str(caught.exception))

    def test_a_stop_that_is_neither_dict_nor_function(self):
        with self.assertRaises(ValueError):
            tune.RunConfig(stop=3)


class RayExamplesPackage(unittest.TestCase):
    def test_tune_examples_finds_the_module_beside_the_script(self):
        # Ray's pbt_convnet_function_example calls ray.tune.examples.mnist_pytorch.train_func
        # after `from ray.tune.examples.mnist_pytorch import ...` became `from mnist_pytorch import`.
        import shutil
        import libtune as ray
        d = tempfile.mkdtemp()
        try:
            with open(os.path.join(d, "beside_script_mod.py"), "w") as f:
                f.write("def train_func():\n    return 7\n")
            sys.path.insert(0, d)
            self.assertEqual(ray.tune.examples.beside_script_mod.train_func(), 7)
            with self.assertRaisesRegex(AttributeError, "libtune ships no examples; put no_such_example.py"):
                ray.tune.examples.no_such_example
        finally:
            sys.path.remove(d)
            sys.modules.pop("beside_script_mod", None)
            shutil.rmtree(d)


if __name__ == "__main__":
    unittest.main()
