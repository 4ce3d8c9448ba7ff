"""Ray Tune's search-space functions in libtune.tune: what each becomes in libtune's search
space (docs/run.md, "The search space"), what each draws, and the bad input each refuses.

Run from the repository root:  PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest

from libtune import tune
from libtune.tune.search.sample import space_to_json


class Domains(unittest.TestCase):
    def test_each_function_is_the_space_key_of_the_same_name(self):
        space = {
            "a": tune.uniform(0.0, 1.0), "b": tune.quniform(0, 0.01, 0.001), "c": tune.loguniform(1e-4, 0.1),
            "d": tune.qloguniform(1e-5, 1e-2, 1e-5), "e": tune.randn(10, 2), "f": tune.qrandn(0, 1, 0.5),
            "g": tune.randint(64, 513), "h": tune.qrandint(64, 512, 64), "i": tune.lograndint(1, 16),
            "j": tune.qlograndint(1, 16, 1), "k": tune.choice([64, 128, 256]), "l": tune.grid_search([1, 2, 3]),
        }
        self.assertEqual(space_to_json(space), {
            "a": {"uniform": [0.0, 1.0]}, "b": {"quniform": [0, 0.01, 0.001]}, "c": {"loguniform": [1e-4, 0.1]},
            "d": {"qloguniform": [1e-5, 1e-2, 1e-5]}, "e": {"randn": [10, 2]}, "f": {"qrandn": [0, 1, 0.5]},
            "g": {"randint": [64, 513]}, "h": {"qrandint": [64, 512, 64]}, "i": {"lograndint": [1, 16]},
            "j": {"qlograndint": [1, 16, 1]}, "k": {"choice": [64, 128, 256]}, "l": {"grid_search": [1, 2, 3]},
        })

    def test_ray_defaults(self):
        self.assertEqual(tune.randn().to_json(), {"randn": [0.0, 1.0]})
        self.assertEqual(tune.qrandint(1, 10).to_json(), {"qrandint": [1, 10, 1]})
        self.assertEqual(tune.loguniform(1e-3, 1, base=2).to_json(), {"loguniform": [1e-3, 1]},
                         "a log-uniform distribution is the same in every base")
        self.assertEqual(tune.grid_search((1, 2)), {"grid_search": [1, 2]}, "Ray's own form: a dict")

    def test_nested_spaces_constants_and_choices_of_dicts(self):
        space = {
            "epochs": 8, "act": "relu", "sizes": [1, 2], "flag": True, "none": None,
            "model": {"depth": tune.randint(1, 5), "width": 64},
            "opt": tune.choice([{"name": "sgd", "m": tune.uniform(0, 0.9)}, {"name": "adam"}]),
        }
        self.assertEqual(space_to_json(space), {
            "epochs": 8, "act": "relu", "sizes": [1, 2], "flag": True, "none": None,
            "model": {"depth": {"randint": [1, 5]}, "width": 64},
            "opt": {"choice": [{"name": "sgd", "m": {"uniform": [0, 0.9]}}, {"name": "adam"}]},
        })

    def test_a_constant_dict_that_reads_as_a_domain_stays_a_constant(self):
        self.assertEqual(space_to_json({"x": {"choice": [1, 2]}}), {"x": {"constant": {"choice": [1, 2]}}})
        self.assertEqual(space_to_json({"x": {"choice": [1, 2], "weights": [3, 1]}}),
                         {"x": {"constant": {"choice": [1, 2], "weights": [3, 1]}}})
        with self.assertRaisesRegex(ValueError, r"param_space\.x: a parameter named 'uniform' that holds a domain"):
            space_to_json({"x": {"uniform": tune.uniform(0, 1)}})

    def test_grid_search_written_by_hand_as_ray_allows(self):
        self.assertEqual(space_to_json({"seed": {"grid_search": [1, 2]}}), {"seed": {"grid_search": [1, 2]}})
        with self.assertRaisesRegex(ValueError, r"param_space\.seed: grid_search needs a non-empty list"):
            space_to_json({"seed": {"grid_search": 3}})

    def test_samples_fall_in_their_domains(self):
        rng = random.Random(7)
        for _ in range(500):
            self.assertTrue(0 <= tune.uniform(0, 1).sample(rng) < 1)
            x = tune.loguniform(1e-4, 0.1).sample(rng)
            self.assertTrue(1e-4 <= x <= 0.1)
            self.assertIn(tune.randint(3, 6).sample(rng), (3, 4, 5), "upper excluded")
            self.assertIn(tune.qrandint(0, 10, 5).sample(rng), (0, 5, 10), "upper included")
            i = tune.lograndint(1, 16).sample(rng)
            self.assertTrue(1 <= i < 16)
            q = tune.quniform(0, 1, 0.25).sample(rng)
            self.assertTrue(math.isclose(q / 0.25, round(q / 0.25)))
            self.assertIn(tune.choice(["a", "b"]).sample(rng), ("a", "b"))
        self.assertTrue(any(tune.qrandint(0, 10, 5).sample(rng) == 10 for _ in range(200)))


class BadInput(unittest.TestCase):
    def test_bounds_are_checked_where_the_domain_is_made(self):
        for call, message in [
            (lambda: tune.uniform(1, 1), r"uniform\(1, 1\): the lower bound must be below the upper one"),
            (lambda: tune.loguniform(0, 0.1), r"loguniform\(0, 0.1\): a log scale needs a lower bound > 0"),
            (lambda: tune.lograndint(0, 10), r"lograndint\(0, 10\): a log scale needs a lower bound > 0"),
            (lambda: tune.randint(1.5, 4), r"randint: lower must be a whole number, not 1.5"),
            (lambda: tune.quniform(0, 1, 0), r"quniform: q must be > 0, not 0"),
            (lambda: tune.qrandint(0, 10, 2.5), r"qrandint: q must be a whole number"),
            (lambda: tune.randn(0, -1), r"randn\(0, -1\): sd must be > 0"),
            (lambda: tune.uniform(0, float("inf")), r"uniform: upper must be a finite number"),
            (lambda: tune.uniform("0", 1), r"uniform: lower must be a finite number, not '0'"),
            (lambda: tune.uniform(True, 2), r"uniform: lower must be a finite number, not True"),
            (lambda: tune.loguniform(1e-3, 1, base=1), r"loguniform: base must be > 0 and not 1"),
            (lambda: tune.choice([]), r"choice needs at least one value"),
            (lambda: tune.choice("abc"), r"choice needs a list of values, not 'abc'"),
            (lambda: tune.grid_search(5), r"grid_search needs a list of values, not 5"),
            (lambda: tune.sample_from(3), r"sample_from needs a function"),
        ]:
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    call()

    def test_sample_from_is_named_with_what_to_write_instead(self):
        space = {"model": {"width": tune.sample_from(lambda spec: 64)}}
        with self.assertRaisesRegex(ValueError, r"param_space\.model\.width: sample_from is not supported.*"
                                                r"tune\.uniform.*inside the trainable"):
            space_to_json(space)

    def test_what_json_cannot_hold_is_named_where_it_is(self):
        with self.assertRaisesRegex(ValueError, r"param_space\.data: object .* cannot go in the search space"
                                                r".*tune\.with_parameters"):
            space_to_json({"data": object()})
        with self.assertRaisesRegex(ValueError, r"param_space\.lr: nan cannot be a constant"):
            space_to_json({"lr": float("nan")})
        with self.assertRaisesRegex(ValueError, r"param_space: the key 3 is not a string"):
            space_to_json({3: 1})
        with self.assertRaisesRegex(ValueError, r"param_space\.opt\.choice\[1\]\.m: sample_from"):
            space_to_json({"opt": tune.choice([{"m": 1}, {"m": tune.sample_from(lambda s: 1)}])})


@unittest.skipUnless(os.environ.get("LIBTUNE_TUNE"), "LIBTUNE_TUNE (the tune CLI) is not set")
class TheEngineReadsIt(unittest.TestCase):
    """The space as the driver hands it to `tune run` (an embedded cluster, real trials):
    accepted, the grid's points each a trial, constants that read as domains kept."""

    def test_tune_run_takes_the_space(self):
        space = space_to_json({
            "lr": tune.loguniform(1e-4, 0.1), "width": tune.qrandint(64, 512, 64), "seed": tune.grid_search([1, 2]),
            "x": {"choice": [1, 2]}, "model": {"depth": tune.randint(1, 5)},
            "opt": tune.choice([{"name": "sgd", "m": tune.uniform(0, 0.9)}, {"name": "adam"}]),
        })
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o755)
            run = subprocess.run(
                [os.environ["LIBTUNE_TUNE"], "run", "--local", "--num-cpus", "2", "--metric", "v", "--mode", "max",
                 "--samples", "1", "--progress", "none", "--no-working-dir", "--space", json.dumps(space),
                 "--experiment-dir", os.path.join(d, "exp"), "--",
                 sys.executable, "-c", "import libtune; libtune.report(v=1)"],
                capture_output=True, text=True, timeout=120, cwd=d,
                env=dict(os.environ, TUNE_SHARED_DIR=os.path.join(d, "shared")))
            self.assertEqual(run.returncode, 0, run.stderr)
            result = json.loads(run.stdout.strip().splitlines()[-1])
            self.assertEqual((result["trials"], result["errors"]), (2, 0), run.stderr)
            with open(os.path.join(d, "exp", "trials.json")) as f:
                trials = json.load(f)
            trials = trials if isinstance(trials, list) else trials["trials"]
            configs = [t["config"] for t in trials]
            self.assertEqual(sorted(c["seed"] for c in configs), [1, 2])
            for c in configs:
                self.assertEqual(c["x"], {"choice": [1, 2]})
                self.assertTrue(1e-4 <= c["lr"] <= 0.1 and c["width"] % 64 == 0 and 1 <= c["model"]["depth"] < 5, c)
                self.assertIn(c["opt"]["name"], ("sgd", "adam"))


if __name__ == "__main__":
    unittest.main()
