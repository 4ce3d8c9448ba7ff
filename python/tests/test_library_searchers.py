"""Ray's searchers as their libraries, run in the driver (docs/hooks.md), through the
real engine: HyperOptSearch with hyperopt's own (conditional) space, NevergradSearch,
BayesOptSearch with bayes_opt, AxSearch with Ax (its AxClient; Ax needs PyTorch, so
only where both are installed), Repeater around a searcher of the user's, PB2; and what
each refuses. A library's tests skip where it is not installed (Debian's python3 in
the python_module test); the CTest test python_library_searchers runs them in the
Ray examples' virtual environment (tests/ray_examples/requirements.txt).

Run from the repository root:
  LIBTUNE_TUNE=build/nodes/tune PYTHONPATH=python VENV/bin/python -m unittest python/tests/test_library_searchers.py -v
"""

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

import libtune
from libtune import tune
from libtune.tune.schedulers import PB2
from libtune.tune.search import AxSearch, NevergradSearch, Repeater, Searcher, TPESearch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_tests.py beside this file
from engine_tests import needs_engine  # noqa: E402


def has(module):
    return unittest.skipUnless(importlib.util.find_spec(module), f"{module} is not installed")


def objective(config):
    x = config.get("x", 0.0)
    for i in range(3):
        tune.report({"loss": (x - 0.3) ** 2 + 0.01 * i, "seen": json.dumps(config, sort_keys=True)})


class Engine(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        os.chmod(self.tmp, 0o755)
        libtune.init(num_cpus=2, log_to_driver=False)
        self.rc = lambda **kw: tune.RunConfig(storage_path=self.tmp, verbose=0, **kw)

    def tearDown(self):
        libtune.shutdown()
        subprocess.run(["rm", "-rf", self.tmp])

    def fit(self, trainable, name, search, num_samples, param_space=None, **tc):
        return tune.Tuner(trainable, param_space=param_space or {},
                          tune_config=tune.TuneConfig(metric="loss", mode="min", search_alg=search,
                                                      num_samples=num_samples, **tc),
                          run_config=self.rc(name=name)).fit()

    @needs_engine
    @has("hyperopt")
    def test_hyperopt_runs_its_own_conditional_space(self):
        from hyperopt import hp
        from libtune.tune.search.hyperopt import HyperOptSearch
        space = {"x": hp.uniform("x", 0, 1),
                 "model": hp.choice("model", [{"kind": "linear"},
                                              {"kind": "mlp", "width": hp.quniform("width", 8, 64, 8)}])}
        search = HyperOptSearch(space, metric="loss", mode="min", n_initial_points=3, random_state_seed=1,
                                points_to_evaluate=[{"x": 0.3, "model": 0}])  # Ray's: a choice's index
        grid = self.fit(objective, "hyperopt", search, 8, param_space={"const": 7})
        self.assertEqual(grid.num_errors, 0)
        self.assertTrue(all(r.config["const"] == 7 for r in grid), "param_space's constants are added")
        configs = [{k: v for k, v in r.config.items() if k != "const"} for r in grid]
        self.assertEqual(len(configs), 8)
        self.assertIn({"x": 0.3, "model": {"kind": "linear"}}, configs, "points_to_evaluate came first")
        for c in configs:
            self.assertTrue(0 <= c["x"] <= 1, c)
            self.assertIn(c["model"]["kind"], ("linear", "mlp"))
            if c["model"]["kind"] == "mlp":
                self.assertIn(c["model"]["width"], [8.0 * k for k in range(1, 9)], c)
            else:
                self.assertNotIn("width", c["model"], "the branch not taken has no parameters")
        trials = search._lib._trials
        self.assertEqual(sum(1 for d in trials.trials if d["result"].get("status") == "ok"), 8,
                         "Hyperopt was told every trial's loss")

    @needs_engine
    @has("nevergrad")
    def test_nevergrad_asks_and_is_told(self):
        import nevergrad as ng
        search = NevergradSearch(optimizer=ng.optimizers.OnePlusOne, metric="loss", mode="min")
        grid = self.fit(objective, "nevergrad", search, 6,
                        param_space={"x": tune.uniform(0, 1), "k": tune.choice(["a", "b"]), "n": 5})
        self.assertEqual(grid.num_errors, 0)
        for r in grid:
            self.assertTrue(0 <= r.config["x"] <= 1 and r.config["k"] in ("a", "b") and r.config["n"] == 5,
                            r.config)
        self.assertEqual(search._lib._opt.num_tell, 6)

    @needs_engine
    @has("bayes_opt")
    def test_bayes_opt_runs_with_a_utility(self):
        from libtune.tune.search.bayesopt import BayesOptSearch
        search = BayesOptSearch(utility_kwargs={"kind": "ucb", "kappa": 2.5, "xi": 0.0}, random_search_steps=2,
                                metric="loss", mode="min")
        self.assertTrue(search._in_driver, "bayes_opt is installed: it runs")
        grid = self.fit(objective, "bayesopt", search, 6, param_space={"x": tune.uniform(0, 1)},
                        max_concurrent_trials=1)
        self.assertEqual(grid.num_errors, 0)
        self.assertEqual(len(search._lib._opt.space), 6, "bayes_opt was told every trial")
        self.assertTrue(all(0 <= r.config["x"] <= 1 for r in grid))

    @needs_engine
    @has("ax")
    def test_ax_runs_with_its_constraints_and_is_told_every_trial(self):
        import pickle
        import warnings
        warnings.simplefilter("ignore")  # Ax's and pandas' deprecation notices

        def trainable(config):
            if config["x2"] > 0.9:
                raise RuntimeError("too far")  # Ax is told the trial failed
            tune.report({"loss": (config["x1"] - 0.2) ** 2 + config["x2"], "size": config["x1"] * 2,
                         "n": config["n"]})

        search = AxSearch(parameter_constraints=["x1 + x2 <= 1.0"], outcome_constraints=["size <= 1.5"],
                          random_seed=4)
        grid = self.fit(trainable, "ax", search, 8, max_concurrent_trials=2,
                        param_space={"x1": tune.uniform(0, 1), "x2": tune.uniform(0, 1), "n": 5,
                                     "k": tune.choice([1, 2]), "lr": tune.loguniform(1e-4, 1e-1)})
        self.assertEqual(len(grid), 8)
        for r in grid:
            self.assertLessEqual(r.config["x1"] + r.config["x2"], 1.0 + 1e-9, r.config)
            self.assertEqual(r.config["n"], 5, "a constant of param_space stays")
            self.assertIn(r.config["k"], (1, 2))
            self.assertTrue(1e-4 <= r.config["lr"] <= 1e-1, r.config)
        ax = search._lib._ax
        statuses = [t.status.name for t in ax.experiment.trials.values()]
        self.assertEqual(len(statuses), 8)
        self.assertEqual(statuses.count("COMPLETED") + statuses.count("FAILED"), 8, statuses)
        self.assertEqual(statuses.count("FAILED"), grid.num_errors, statuses)
        # Kept as Ax's own snapshot (Tuner.restore), and it goes on suggesting after.
        again = pickle.loads(pickle.dumps(search._lib))
        self.assertEqual(len(again._ax.experiment.trials), 8)
        self.assertIn("x1", again.suggest("after-restore"))

    @needs_engine
    def test_repeater_runs_each_config_repeat_times_and_tells_the_mean(self):
        class Steps(Searcher):
            def __init__(self):
                super().__init__(metric="loss", mode="min")
                self.told = []
                self.n = 0

            def suggest(self, trial_id):
                self.n += 1
                return {"x": 0.1 * self.n} if self.n <= 2 else Searcher.FINISHED

            def on_trial_complete(self, trial_id, result=None, error=False):
                self.told.append((trial_id, result))

        inner = Steps()
        grid = self.fit(objective, "repeat", Repeater(inner, repeat=3), 10)
        configs = sorted((r.config["x"], r.config["__trial_index__"]) for r in grid)
        self.assertEqual([(round(x, 6), i) for x, i in configs],
                         [(0.1, 0), (0.1, 1), (0.1, 2), (0.2, 0), (0.2, 1), (0.2, 2)])
        self.assertEqual(sorted(t for t, _ in inner.told), ["repeat-group-0", "repeat-group-1"])
        for _, result in inner.told:
            self.assertIn("loss", result)

    @needs_engine
    @has("numpy")
    def test_pb2_chooses_new_values_within_the_bounds(self):
        def trainable(config):
            start = 0
            ckpt = tune.get_checkpoint()
            if ckpt:
                with ckpt.as_directory() as d:
                    with open(os.path.join(d, "step")) as f:
                        start = int(f.read())
            for i in range(start, 40):
                time.sleep(0.02)
                with tempfile.TemporaryDirectory() as d:
                    with open(os.path.join(d, "step"), "w") as f:
                        f.write(str(i + 1))
                    tune.report({"score": -abs(config["lr"] - 0.05) * (i + 1)},
                                checkpoint=tune.Checkpoint.from_directory(d))

        pb2 = PB2(time_attr="training_iteration", perturbation_interval=4, seed=3,
                  hyperparam_bounds={"lr": [0.001, 0.1]})
        grid = tune.Tuner(trainable, param_space={"lr": tune.grid_search([0.001, 0.002, 0.09, 0.1])},
                          tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pb2),
                          run_config=self.rc(name="pb2", stop={"training_iteration": 40})).fit()
        self.assertEqual(grid.num_errors, 0)
        db = sqlite3.connect(os.path.join(grid.experiment_path, "experiment.db"))
        explored = [json.loads(b)["config"]["lr"] for (b,) in db.execute(
            "SELECT body FROM events WHERE kind = 'exploit'")]
        db.close()
        self.assertTrue(explored, "PB2 never exploited")
        self.assertTrue(all(0.001 <= lr <= 0.1 for lr in explored), explored)
        self.assertTrue(len(pb2._rows) > 10, "the model learnt from the results")


class BadInput(unittest.TestCase):
    def test_refusals_name_the_problem(self):
        with self.assertRaisesRegex(ValueError, "AxSearch: give one metric and mode"):
            AxSearch(metric=["a", "b"], mode=["min", "max"])
        with self.assertRaisesRegex(ValueError, "libtune's own searchers run in the engine"):
            Repeater(TPESearch(), repeat=2)
        with self.assertRaisesRegex(ValueError, "repeat must be"):
            Repeater(type("S", (Searcher,), {"suggest": lambda self, t: {}})(), repeat=0)

    @has("numpy")
    def test_pb2_bounds_are_checked(self):
        with self.assertRaisesRegex(ValueError, "hyperparam_bounds is required"):
            PB2(time_attr="training_iteration", perturbation_interval=2)
        with self.assertRaisesRegex(ValueError, r"hyperparam_bounds\['lr'\] must be \[lower, upper\]"):
            PB2(time_attr="training_iteration", perturbation_interval=2, hyperparam_bounds={"lr": [0.1, 0.01]})

    @has("nevergrad")
    def test_nevergrad_needs_an_optimizer_and_a_modelable_space(self):
        with self.assertRaisesRegex(ValueError, "give optimizer="):
            NevergradSearch(metric="loss", mode="min")
        import nevergrad as ng
        s = NevergradSearch(optimizer=ng.optimizers.OnePlusOne, metric="loss", mode="min")
        with self.assertRaisesRegex(ValueError, "randn"):
            s.set_search_properties("loss", "min", {"x": tune.randn(0, 1)})

    @has("hyperopt")
    def test_hyperopt_refuses_a_grid(self):
        from libtune.tune.search.hyperopt import HyperOptSearch
        s = HyperOptSearch(metric="loss", mode="min")
        self.assertFalse(s._in_driver, "without a space of its own: libtune's TPE")
        from hyperopt import hp
        s = HyperOptSearch({"x": hp.uniform("x", 0, 1)}, metric="loss", mode="min")
        self.assertTrue(s._in_driver)
        with self.assertRaisesRegex(ValueError, "param_space has domains \\(y\\) but HyperOptSearch was given"):
            s.set_search_properties("loss", "min", {"y": tune.uniform(0, 1), "n": 3})

    @has("ax")
    def test_ax_refuses_what_it_cannot_model(self):
        s = AxSearch(metric="loss", mode="min")
        with self.assertRaisesRegex(ValueError, "Ax has no parameter for"):
            s.set_search_properties("loss", "min", {"x": tune.quniform(0, 1, 0.1)})
        with self.assertRaisesRegex(ValueError, "grid_search"):
            AxSearch(metric="loss", mode="min").set_search_properties("loss", "min", {"x": tune.grid_search([1, 2])})
        s = AxSearch(space=[{"name": "x", "type": "range", "bounds": [0.0, 1.0]}], metric="loss", mode="min")
        with self.assertRaisesRegex(ValueError, r"param_space has domains \(y\) but AxSearch was given"):
            s.set_search_properties("loss", "min", {"y": tune.uniform(0, 1)})
        with self.assertRaisesRegex(TypeError, "give Ax's parameters"):
            AxSearch(space={"x": (0, 1)}, metric="loss", mode="min")

    def test_ax_missing_is_named_with_its_pip_name(self):
        if importlib.util.find_spec("ax"):
            self.skipTest("ax is installed")
        with self.assertRaisesRegex(ImportError, "pip install ax-platform"):
            AxSearch(metric="loss", mode="min")

    def test_a_missing_library_is_named_with_its_pip_name(self):
        if importlib.util.find_spec("nevergrad"):
            self.skipTest("nevergrad is installed")
        with self.assertRaisesRegex(ImportError, "pip install nevergrad"):
            NevergradSearch(optimizer=object, metric="loss", mode="min")


if __name__ == "__main__":
    unittest.main()
