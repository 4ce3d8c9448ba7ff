"""Ray Tune's calls inside a trial (libtune.tune.report, get_checkpoint, get_context,
Checkpoint): real child processes with a node's environment and a real report pipe,
as test_libtune.py's own tests run them.

Run from the repository root:  PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import os
import signal
import unittest

from test_libtune import Child, TrialTestCase

PRELUDE = "import json, os, sys\nfrom libtune import tune\nimport libtune\n"


class InsideATrial(TrialTestCase):
    def test_report_with_and_without_checkpoint(self):
        out, err, report = self.run_script("""
            tune.report({"loss": 0.5})
            d = os.path.join(os.environ["TMPDIR"], "ckpt")
            os.makedirs(d)
            with open(os.path.join(d, "model.txt"), "w") as f:
                f.write("weights")
            tune.report({"loss": 0.25}, checkpoint=tune.Checkpoint.from_directory(d))
            print(json.dumps([tune.get_checkpoint() is None, tune.get_context().get_trial_id(),
                              tune.get_context().get_trial_dir(), libtune.get_gpu_ids()]))
        """, prelude=PRELUDE)
        lines = self.lines(report)
        # The checkpoint goes before its result, which may end the trial (a stop criterion's
        # SIGTERM would otherwise come between the two lines).
        self.assertEqual([(l["type"], l.get("iteration")) for l in lines],
                         [("result", 1), ("checkpoint", 2), ("result", 2)])
        self.assertEqual(lines[2]["metrics"], {"loss": 0.25})
        self.assertEqual(lines[1]["dir"], "checkpoints/2")
        with open(os.path.join(self.trial_dir, "checkpoints", "2", "model.txt")) as f:
            self.assertEqual(f.read(), "weights")
        self.assertEqual(out.strip(), '[true, "trial-00003", "%s", []]' % self.trial_dir)

    def test_a_restored_trial_gets_its_checkpoint_and_counts_on_from_it(self):
        restore = os.path.join(self.tmp, "checkpoints", "7")
        os.makedirs(restore)
        with open(os.path.join(restore, "step.txt"), "w") as f:
            f.write("7")
        out, _, report = self.run_script("""
            ck = tune.get_checkpoint()
            with ck.as_directory() as d:
                step = int(open(os.path.join(d, "step.txt")).read())
            copy = ck.to_directory()
            print(json.dumps([step, os.path.exists(os.path.join(copy, "step.txt"))]))
            tune.report({"step": step + 1})
        """, env=self.env(TUNE_RESTORE_DIR=restore), prelude=PRELUDE)
        self.assertEqual(out.strip(), "[7, true]")
        self.assertEqual(self.lines(report)[0]["iteration"], 8)

    def test_a_dict_checkpoints_folder_is_removed_once_reported(self):
        out, _, report = self.run_script("""
            ck = tune.Checkpoint.from_dict({"step": 3})
            made = ck.path
            tune.report({"loss": 0.5}, checkpoint=ck)
            print(json.dumps([os.path.exists(made), ck.path, ck.to_dict()]))
            lost = tune.Checkpoint.from_dict({"step": 4}).path  # never reported: gone with the checkpoint
            print(json.dumps(os.path.exists(lost)))
        """, prelude=PRELUDE)
        first, second = out.splitlines()
        stored = os.path.join(self.trial_dir, "checkpoints", "1")
        self.assertEqual(json.loads(first), [False, stored, {"step": 3}])
        self.assertEqual(json.loads(second), False)
        self.assertEqual([l["type"] for l in self.lines(report)], ["checkpoint", "result"])
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("checkpoint-")], [])

    def test_a_stopped_loop_does_not_return_from_report(self):
        child = Child(PRELUDE + "i = 0\nwhile True:\n    i += 1\n    tune.report({'i': i})\n    import time; "
                      "time.sleep(0.01)\n", self.env())
        child.wait_lines(3)
        child.terminate_group()
        rc, out, err, report = child.finish()
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertNotIn("Traceback", err)

    def test_bad_input_is_named(self):
        _, err, _ = self.run_script("tune.report(0.5)\n", expect_rc=1, prelude=PRELUDE)
        self.assertIn("tune.report(metrics): metrics must be a dict of name -> number, not float", err)
        _, err, _ = self.run_script("tune.report({'a': 1}, checkpoint='/tmp')\n", expect_rc=1, prelude=PRELUDE)
        self.assertIn("give a tune.Checkpoint (Checkpoint.from_directory(path)), not str", err)
        _, err, _ = self.run_script("tune.Checkpoint.from_directory('/nonexistent-ckpt')\n", expect_rc=1,
                                    prelude=PRELUDE)
        self.assertIn("Checkpoint.from_directory('/nonexistent-ckpt'): no such folder", err)


class OutsideATrial(TrialTestCase):
    def test_report_and_get_context_outside_a_trial_say_so(self):
        for call in ("tune.report({'loss': 1})", "tune.get_context()"):
            _, err, report = self.run_script(call + "\n", env=self.env(trial=False), expect_rc=1, prelude=PRELUDE,
                                             report_pipe=False)
            self.assertIn("was called outside a trial", err)
            self.assertIn("Tuner(trainable).fit()", err)
        out, _, _ = self.run_script("print(tune.get_checkpoint())\n", env=self.env(trial=False), prelude=PRELUDE,
                                    report_pipe=False)
        self.assertEqual(out.strip(), "None")


if __name__ == "__main__":
    unittest.main()
