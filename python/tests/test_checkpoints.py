"""Checkpoints as CheckpointConfig asks (docs/ray-tune.md), through the real engine:
every reported checkpoint is kept until num_to_keep removes it (the best by the score
attribute, else the newest), checkpoint_frequency and checkpoint_at_end exactly, and a
checkpoint that cannot be stored (a full disk) is said at once, an event in the store,
and the trial's error when it leaves the trial without any.

Run from the repository root:
  LIBTUNE_TUNE=build/nodes/tune PYTHONPATH=python python3 -m unittest python/tests/test_checkpoints.py -v
"""

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from libtune import tune
from libtune.tune import Checkpoint, CheckpointConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_tests.py beside this file
from engine_tests import needs_engine  # noqa: E402

SCORES = [3, 9, 1, 7, 5, 2]  # what each iteration reports, in order


def every_iteration(config):
    """A checkpoint at each of six iterations, quickly one after the other."""
    for i, score in enumerate(SCORES, start=1):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state"), "w") as f:
                f.write(str(i))
            with open(os.path.join(d, "weights"), "wb") as f:
                f.write(os.urandom(config.get("size", 16)))
            tune.report({"score": score}, checkpoint=Checkpoint.from_directory(d))


class Counter(tune.Trainable):
    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        return {"score": self.i}

    def save_checkpoint(self, folder):
        with open(os.path.join(folder, "i"), "w") as f:
            f.write(str(self.i))

    def load_checkpoint(self, folder):
        with open(os.path.join(folder, "i")) as f:
            self.i = int(f.read())


def kept(result):
    return [c.iteration for c, _ in result.best_checkpoints]


def events(experiment_path, kind):
    db = sqlite3.connect(f"file:{os.path.join(experiment_path, 'experiment.db')}?mode=ro", uri=True, timeout=5)
    try:
        return db.execute("SELECT trial, body FROM events WHERE kind = ?", (kind,)).fetchall()
    finally:
        db.close()


@needs_engine
class Kept(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="libtune-ckpt-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.runs = 0

    def fit(self, trainable, checkpoint_config, **run):
        self.runs += 1
        run.setdefault("name", f"run{self.runs}")
        return tune.Tuner(trainable, param_space={"x": 1},
                          tune_config=tune.TuneConfig(metric="score", mode="max"),
                          run_config=tune.RunConfig(storage_path=self.dir, verbose=0,
                                                    checkpoint_config=checkpoint_config, **run)).fit()

    def test_every_reported_checkpoint_is_kept_by_default(self):
        grid = self.fit(every_iteration, CheckpointConfig())
        self.assertEqual(grid.num_errors, 0, grid.errors)
        self.assertEqual(kept(grid[0]), [1, 2, 3, 4, 5, 6])
        self.assertEqual(grid[0].checkpoint.iteration, 6)
        with grid[0].checkpoint.as_directory() as d, open(os.path.join(d, "state")) as f:
            self.assertEqual(f.read(), "6")  # the files are the newest checkpoint's own

    def test_num_to_keep_keeps_the_newest(self):
        grid = self.fit(every_iteration, CheckpointConfig(num_to_keep=2))
        self.assertEqual(kept(grid[0]), [5, 6])

    def test_num_to_keep_by_score_keeps_the_best_and_the_newest(self):
        grid = self.fit(every_iteration, CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score"))
        self.assertEqual(kept(grid[0]), [2, 4, 6])  # 9 and 7 best; 6 the newest
        grid = self.fit(every_iteration, CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="score",
                                                          checkpoint_score_order="min"))
        self.assertEqual(kept(grid[0]), [3, 6])

    def test_checkpoint_frequency_and_at_end_exactly(self):
        grid = self.fit(Counter, CheckpointConfig(checkpoint_frequency=3, checkpoint_at_end=True),
                        stop={"training_iteration": 10})
        self.assertEqual(grid.num_errors, 0, grid.errors)
        self.assertEqual(kept(grid[0]), [3, 6, 9, 10])
        grid = self.fit(Counter, CheckpointConfig(checkpoint_frequency=2), stop={"training_iteration": 5})
        self.assertEqual(kept(grid[0]), [2, 4])


@needs_engine
@unittest.skipUnless(os.geteuid() == 0, "a full disk is a small tmpfs: mounting one needs root")
class FullDisk(unittest.TestCase):
    def storage_with_a_full_disk(self, name):
        """A storage folder whose experiment `name` keeps its checkpoints on a disk of
        1 MiB (the store beside them has room); removed after the test."""
        folder = tempfile.mkdtemp(prefix="libtune-full-")
        self.addCleanup(shutil.rmtree, folder, True)
        full = os.path.join(folder, name, "checkpoints")
        os.makedirs(full)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", full]).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        self.addCleanup(subprocess.run, ["umount", "-l", full])
        return folder

    def test_a_checkpoint_that_cannot_be_stored_is_said_and_one_left_with_none_fails(self):
        # Three checkpoints of 300 kB fit on the 1 MiB, not the 18 the trials report.
        folder = self.storage_with_a_full_disk("full")
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            grid = tune.Tuner(every_iteration, param_space={"size": 300_000, "x": tune.grid_search([1, 2, 3])},
                              tune_config=tune.TuneConfig(metric="score", mode="max"),
                              run_config=tune.RunConfig(storage_path=folder, name="full", verbose=1)).fit()
        failed = events(grid.experiment_path, "checkpoint_copy_failed")
        self.assertTrue(failed, "the disk filled, yet no copy failed")
        self.assertIn("No space left on device", failed[0][1])
        self.assertIn("could not be stored", said.getvalue())
        for r in grid:
            if r.checkpoint is None:  # none stored: its error, naming why
                self.assertIsNotNone(r.error)
                self.assertIn("could not be stored", str(r.error))
            else:  # what it hands back says which iteration it is
                self.assertEqual(r.checkpoint.path.rsplit("/", 1)[1], str(r.checkpoint.iteration))
        self.assertTrue(any(r.error for r in grid) or all(r.checkpoint for r in grid))

    def test_a_trial_whose_first_copy_failed_but_a_newer_was_stored_is_no_error(self):
        folder = self.storage_with_a_full_disk("big")
        with contextlib.redirect_stderr(io.StringIO()):
            grid = tune.Tuner(big_then_small, tune_config=tune.TuneConfig(metric="score", mode="max"),
                              run_config=tune.RunConfig(storage_path=folder, name="big", verbose=0)).fit()
        self.assertTrue(events(grid.experiment_path, "checkpoint_copy_failed"), "the big one should not fit")
        r = grid[0]
        self.assertIsNone(r.error, "a newer checkpoint was stored: the trial has one")
        self.assertIsNotNone(r.checkpoint)
        # (It may have been stopped when the big one failed with none stored yet: the
        # small ones reported before the stop are stored, the newest is its checkpoint.)
        self.assertGreaterEqual(r.checkpoint.iteration, 2)
        stored = [json.loads(b)["iteration"] for _, b in events(grid.experiment_path, "checkpoint_stored")]
        self.assertEqual(r.checkpoint.iteration, max(stored))


def big_then_small(config):
    """A checkpoint of 2 MB (no room for it), then four small ones right after it."""
    for i in range(1, 6):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state"), "wb") as f:
                f.write(b"x" * (2_000_000 if i == 1 else 10))
            tune.report({"score": float(i)}, checkpoint=tune.Checkpoint.from_directory(d))
    time.sleep(0.5)


if __name__ == "__main__":
    unittest.main()
