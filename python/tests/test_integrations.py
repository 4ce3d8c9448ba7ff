"""The integrations' driver side (libtune.integrations, libtune.air.integrations): the
logger callbacks become the experiment file's tracker keys (their readers' side is
tests/trackers/trackers_test.py, with mlflow and wandb installed); other callbacks are
named as not run; Ray's switch for its default loggers turns the trial files off; the
framework callbacks say what they need where it is missing."""

import importlib
import json
import os
import sys
import unittest
from unittest import mock

from libtune import tune
from libtune.air.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
from libtune.air.integrations.wandb import WandbLoggerCallback, setup_wandb
from libtune.integrations import _trackers


def train_fn(config):
    tune.report({"loss": config["x"]})


class LoggerCallbacksTest(unittest.TestCase):
    def test_the_callbacks_become_the_experiment_files_keys_with_this_python(self):
        cbs = [MLflowLoggerCallback("sqlite:///m.db", experiment_name="e", tags={"a": 1}, save_artifact=True,
                                    tracking_token="secret"),
               WandbLoggerCallback(project="p", group="g", api_key="k", excludes=["x"], upload_checkpoints=True,
                                   mode="offline", tags=("t",), entity="me")]
        keys, env = _trackers.experiment_keys(cbs)
        self.assertEqual(keys["mlflow"], {"tracking_uri": "sqlite:///m.db", "experiment_name": "e", "tags": {"a": "1"},
                                          "save_artifact": True})
        self.assertEqual(keys["wandb"], {"project": "p", "group": "g", "excludes": ["x"], "upload_checkpoints": True,
                                         "mode": "offline", "tags": ["t"], "entity": "me"})
        self.assertEqual(keys["tracker_python"], sys.executable)
        # Secrets go to the engine's environment, never into the experiment's files.
        self.assertEqual(env, {"MLFLOW_TRACKING_TOKEN": "secret", "WANDB_API_KEY": "k"})
        self.assertNotIn("secret", json.dumps(keys))

    def test_the_tuners_experiment_has_the_keys_and_ray_s_switch_turns_the_files_off(self):
        rc = tune.RunConfig(callbacks=[MLflowLoggerCallback(experiment_name="e")])
        tuner = tune.Tuner(train_fn, param_space={"x": tune.uniform(0, 1)}, run_config=rc,
                           tune_config=tune.TuneConfig(metric="loss", mode="min"))
        experiment = tuner._plan()[0]
        self.assertEqual(experiment["mlflow"], {"experiment_name": "e"})
        self.assertNotIn("trial_files", experiment)
        with mock.patch.dict(os.environ, {"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}):
            self.assertIs(tuner._plan()[0]["trial_files"], False)

    def test_a_callback_libtune_does_not_run_is_named(self):
        class Mine:
            pass
        with self.assertRaisesRegex(TypeError, r"callbacks=\[Mine\(\.\.\.\)\]\): give tune.Callback objects .*"
                                               r"MLflowLoggerCallback and WandbLoggerCallback"):
            tune.RunConfig(callbacks=[Mine()])
        with self.assertRaisesRegex(ValueError, "MLflowLoggerCallback is given twice"):
            tune.RunConfig(callbacks=[MLflowLoggerCallback(), MLflowLoggerCallback()])
        with self.assertRaisesRegex(ValueError, r"WandbLoggerCallback\(reinit=...\): libtune passes on entity"):
            WandbLoggerCallback(reinit=True)
        with self.assertRaisesRegex(TypeError, r"MLflowLoggerCallback\(tags=...\): give a dict"):
            MLflowLoggerCallback(tags=["a"])

    def test_setup_outside_a_trial_says_where_it_runs(self):
        for setup in (setup_mlflow, setup_wandb):
            with mock.patch.dict(os.environ, {}, clear=False):
                os.environ.pop("TUNE_TRIAL_ID", None)
                with self.assertRaises((RuntimeError, ImportError)) as caught:
                    setup({"x": 1})
                self.assertRegex(str(caught.exception), "inside a trial|outside a trial|pip install")


class FrameworkCallbacksTest(unittest.TestCase):
    def check_needs(self, module, package, words):
        try:
            importlib.import_module(package)
            self.skipTest(f"{package} is installed here (the callback is tested with it on the GPU machine)")
        except ImportError:
            pass
        with self.assertRaisesRegex(ImportError, words):
            importlib.import_module(module)

    def test_lightnings_callback_without_lightning_says_what_to_install(self):
        try:
            importlib.import_module("pytorch_lightning")
            self.skipTest("pytorch_lightning is installed here")
        except ImportError:
            pass
        self.check_needs("libtune.integrations.lightning", "lightning", "needs PyTorch Lightning.*pip install lightning")

    def test_the_trainer_callback_without_transformers_says_what_to_install(self):
        self.check_needs("libtune.integrations.huggingface", "transformers", "needs transformers.*pip install")


if __name__ == "__main__":
    unittest.main()
