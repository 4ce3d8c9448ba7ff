"""Ray Tune's scheduler classes in libtune.tune.schedulers: what each becomes in libtune's
experiment, Ray's defaults, the arguments libtune cannot honour (named, never ignored),
and each accepted by the real `tune run` (LIBTUNE_TUNE, set by ctest).

Run from the repository root:  PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
import warnings

from libtune import tune
from libtune.tune import schedulers as S
from libtune.tune import _checks


class Schedulers(unittest.TestCase):
    def test_ray_names_and_defaults(self):
        self.assertIs(S.ASHAScheduler, S.AsyncHyperBandScheduler)
        self.assertEqual(S.FIFOScheduler().to_json(), "fifo")
        self.assertEqual(S.ASHAScheduler().to_json(),
                         {"type": "asha", "max_t": 100, "grace_period": 1, "reduction_factor": 4, "brackets": 1})
        self.assertEqual(S.ASHAScheduler(metric="acc", mode="max", max_t=8, grace_period=2, reduction_factor=2,
                                         time_attr="training_iteration").to_json(),
                         {"type": "asha", "max_t": 8, "grace_period": 2, "reduction_factor": 2, "brackets": 1})
        self.assertEqual(S.HyperBandScheduler(max_t=27).to_json(),
                         {"type": "hyperband", "max_t": 27, "reduction_factor": 3})
        self.assertEqual(S.MedianStoppingRule(time_attr="training_iteration", grace_period=3).to_json(),
                         {"type": "median_stopping", "grace_period": 3, "min_samples_required": 3})
        pbt = S.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4,
                                        hyperparam_mutations={"lr": tune.loguniform(1e-4, 0.1), "batch": [16, 32]})
        self.assertEqual(pbt.to_json(), {
            "type": "pbt", "perturbation_interval": 4, "burn_in_period": 0, "quantile_fraction": 0.25,
            "resample_probability": 0.25, "perturbation_factors": [1.2, 0.8],
            "hyperparam_mutations": {"lr": {"loguniform": [1e-4, 0.1]}, "batch": [16, 32]}})
        s = S.ASHAScheduler(metric="loss", mode="min")
        self.assertEqual((s.metric, s.mode), ("loss", "min"))

    def test_time_based_defaults_become_iterations_and_say_so(self):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _checks._said.clear()  # the said-once warnings, shared by the driver API
            self.assertEqual(S.MedianStoppingRule().to_json()["grace_period"], 1)
            S.MedianStoppingRule()
            self.assertEqual(S.PopulationBasedTraining(hyperparam_mutations={"lr": [0.1, 0.01]})
                             .to_json()["perturbation_interval"], 10)
            S.MedianStoppingRule(grace_period=60)
            S.MedianStoppingRule(grace_period=60)
            S.MedianStoppingRule(time_attr="training_iteration", grace_period=60)
        texts = [str(w.message) for w in seen]
        self.assertEqual(len(texts), 3, texts)  # once each
        self.assertIn("grace_period=60 is taken as training iterations", texts[2])
        self.assertIn("grace_period is 1 iteration (Ray's default is 60 s of time_total_s)", texts[0])
        self.assertIn("perturbation_interval is 10 iterations", texts[1])

    def test_what_libtune_cannot_honour_is_named(self):
        mut = {"lr": [0.1, 0.01]}
        for call, message in [
            (lambda: S.ASHAScheduler(time_attr="time_total_s"),
             r"AsyncHyperBandScheduler: time_attr='time_total_s' is not supported.*training_iteration"),
            (lambda: S.MedianStoppingRule(time_attr="time_total_s"), r"or leave time_attr out"),
            (lambda: S.ASHAScheduler(max_t=4, grace_period=5), r"grace_period \(5\) must not be above max_t \(4\)"),
            (lambda: S.ASHAScheduler(max_t=0), r"max_t must be a whole number of at least 1"),
            (lambda: S.ASHAScheduler(max_t=2.5), r"max_t must be a whole number"),
            (lambda: S.ASHAScheduler(reduction_factor=1), r"reduction_factor must be a number above 1"),
            (lambda: S.ASHAScheduler(mode="maximize"), r"mode must be 'min' or 'max', not 'maximize'"),
            (lambda: S.MedianStoppingRule(hard_stop=False), r"hard_stop=False is not supported"),
            (lambda: S.MedianStoppingRule(min_time_slice=5), r"min_time_slice=5 is not supported"),
            (lambda: S.PopulationBasedTraining(), r"hyperparam_mutations is required"),
            (lambda: S.PopulationBasedTraining(hyperparam_mutations=mut, synch=True), r"synch=True is not supported"),
            (lambda: S.PopulationBasedTraining(hyperparam_mutations=mut, custom_explore_fn=3),
             r"custom_explore_fn must be a function of the config"),
            (lambda: S.PopulationBasedTraining(hyperparam_mutations=mut, quantile_fraction=0.7),
             r"quantile_fraction must be a number from 0 to 0.5"),
            (lambda: S.PopulationBasedTraining(hyperparam_mutations=mut, perturbation_factors=(1.2,)),
             r"perturbation_factors must be two numbers"),
            (lambda: S.PopulationBasedTraining(hyperparam_mutations={"lr": object()}),
             r"hyperparam_mutations\.lr: object .* cannot go in the search space"),
        ]:
            with self.subTest(message):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with self.assertRaisesRegex(ValueError, message):
                        call()
        # stop_last_trials=False (Ray's examples pass it with stop at max_t) is said, not refused.
        for make in (S.ASHAScheduler, S.HyperBandScheduler, S.HyperBandForBOHB):
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                make(stop_last_trials=False)
            self.assertTrue(any("libtune stops every trial at max_t" in str(w.message) for w in said), make)


@unittest.skipUnless(os.environ.get("LIBTUNE_TUNE"), "LIBTUNE_TUNE (the tune CLI) is not set")
class TheEngineReadsThem(unittest.TestCase):
    """Each scheduler's entry, handed to `tune run` with trials that report 6 iterations."""

    def test_tune_run_takes_each(self):
        trial = "import libtune\nfor i in range(6): libtune.report(v=i * libtune.config()['x'])\n"
        for s in [S.FIFOScheduler(), S.ASHAScheduler(max_t=6, grace_period=1, reduction_factor=2),
                  S.HyperBandScheduler(max_t=6), S.MedianStoppingRule(time_attr="training_iteration", grace_period=1),
                  S.PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                            hyperparam_mutations={"x": tune.uniform(0, 1)})]:
            with self.subTest(type(s).__name__), tempfile.TemporaryDirectory() as d:
                os.chmod(d, 0o755)
                experiment = {"name": "s", "command": [sys.executable, "-c", trial], "working_dir": None,
                              "metric": "v", "mode": "max", "num_samples": 4, "space": {"x": {"uniform": [0, 1]}},
                              "scheduler": s.to_json(), "experiment_dir": os.path.join(d, "exp"), "progress": "none"}
                with open(os.path.join(d, "e.json"), "w") as f:
                    json.dump(experiment, f)
                run = subprocess.run([os.environ["LIBTUNE_TUNE"], "run", os.path.join(d, "e.json"), "--local",
                                      "--num-cpus", "2"], capture_output=True, text=True, timeout=120, cwd=d,
                                     env=dict(os.environ, TUNE_SHARED_DIR=os.path.join(d, "shared")))
                self.assertEqual(run.returncode, 0, run.stderr)
                result = json.loads(run.stdout.strip().splitlines()[-1])
                self.assertEqual((result["trials"], result["errors"]), (4, 0), run.stderr)


if __name__ == "__main__":
    unittest.main()
