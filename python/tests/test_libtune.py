"""Tests of the libtune Python module.

Each test starts a real child Python process (the interpreter running the tests) with
the environment a node gives a trial and a real pipe as its report fd, then reads what
the child wrote there, on stdout and on stderr. The signal tests send real SIGTERMs to
the child's process group, as a node does.

Run from the repository root:  PYTHONPATH=python python3 -m unittest discover -s python/tests -v
"""

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/


class Child:
    """A trial's process: ``script`` run by this interpreter with ``env`` (nothing else
    inherited, as a node does), in its trial folder (or ``cwd``), with the write end of a
    pipe as TUNE_REPORT_FD, in its own process group. The pipe is read all along by a
    thread (from the start unless read_now is False), so the child never blocks."""

    def __init__(self, script, env, report_pipe=True, close_read_end=False, read_now=True, cwd=None):
        env = dict(env)
        pass_fds = ()
        self._buf = bytearray()
        self._cond = threading.Condition()
        self._eof = False
        self._reader = None
        if report_pipe:
            r, w = os.pipe()
            env.setdefault("TUNE_REPORT_FD", str(w))
            pass_fds = (w,)
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], env=env,
                                     pass_fds=pass_fds, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     cwd=cwd or env.get("TUNE_TRIAL_DIR") or env["HOME"])
        if report_pipe:
            os.close(w)
            self.report_r = r
            if close_read_end:
                os.close(r)
            elif read_now:
                self.start_reading()

    def start_reading(self):
        self._reader = threading.Thread(target=self._read, args=(self.report_r,), daemon=True)
        self._reader.start()

    def _read(self, fd):
        try:
            while True:
                chunk = os.read(fd, 65536)
                with self._cond:
                    if not chunk:
                        self._eof = True
                    else:
                        self._buf += chunk
                    self._cond.notify_all()
                if not chunk:
                    return
        finally:
            os.close(fd)

    def wait_lines(self, n, timeout=20):
        """Waits until the report pipe holds at least n whole lines; returns them parsed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._buf.count(b"\n") < n and not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the child wrote %d of %d report lines in %d s"
                                         % (self._buf.count(b"\n"), n, timeout))
                self._cond.wait(left)
            return [json.loads(l) for l in bytes(self._buf).splitlines()]

    def terminate_group(self):
        os.killpg(self.proc.pid, signal.SIGTERM)

    def finish(self, timeout=30):
        """Waits for the child; returns (exit code, stdout, stderr, report bytes)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            raise AssertionError("the child did not end within %d s; stderr:\n%s" % (timeout, err.decode()))
        if self._reader is not None:
            self._reader.join(10)
        return self.proc.returncode, out.decode(), err.decode(), bytes(self._buf)


class TrialTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="libtune-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.trial_dir = os.path.join(self.tmp, "trials", "trial-00003")
        os.makedirs(self.trial_dir)

    def env(self, trial=True, **extra):
        """The environment a node gives a trial (or a bare one when trial is False)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.tmp, "LANG": "C.UTF-8",
               "TMPDIR": self.tmp, "PYTHONPATH": SRC, "PYTHONDONTWRITEBYTECODE": "1"}
        if trial:
            env.update({"TUNE_TRIAL_ID": "trial-00003", "TUNE_NODE_ID": "node-a",
                        "TUNE_TRIAL_DIR": self.trial_dir, "TUNE_TRIAL_CONFIG": '{"lr": 0.05}',
                        "TUNE_TRIAL_GPUS": "[]"})
        env.update({k: v for k, v in extra.items() if v is not None})
        for k in [k for k, v in extra.items() if v is None]:
            env.pop(k, None)
        return env

    def run_script(self, script, env=None, expect_rc=0, prelude="import libtune, json, sys\n", **kw):
        """Runs script to its end; checks its exit code; returns (stdout, stderr, report bytes)."""
        child = Child(prelude + textwrap.dedent(script),
                      self.env() if env is None else env, **kw)
        rc, out, err, report = child.finish()
        self.assertEqual(rc, expect_rc, "exit code; stderr:\n" + err)
        return out, err, report

    def lines(self, report):
        self.assertTrue(report == b"" or report.endswith(b"\n"), report[-200:])
        return [json.loads(l) for l in report.splitlines()]


class ConfigAndEnvironment(TrialTestCase):
    def test_nested_config_ids_and_fresh_copies(self):
        cfg = {"model": "cnn", "lr": 0.05, "opt": {"name": "sgd", "betas": [0.9, 0.99]}, "tags": ["a"]}
        out, _, report = self.run_script("""
            c = libtune.config()
            c["opt"]["name"] = "changed"; c["new"] = 1
            print(json.dumps([libtune.config(), libtune.in_trial(), libtune.trial_id(),
                              libtune.node_id(), libtune.trial_dir(), libtune.restore_dir(),
                              libtune.restore_iteration(), libtune.__version__]))
        """, self.env(TUNE_TRIAL_CONFIG=json.dumps(cfg)))
        self.assertEqual(json.loads(out), [cfg, True, "trial-00003", "node-a", self.trial_dir,
                                           None, None, "0.1.0"])
        self.assertEqual(report, b"")

    def test_config_missing_or_empty_is_empty_dict(self):
        for value in (None, ""):
            out, _, _ = self.run_script("print(json.dumps(libtune.config()))", self.env(TUNE_TRIAL_CONFIG=value))
            self.assertEqual(json.loads(out), {})

    def test_gpus_and_device_ids(self):
        cards = [{"local": 0, "index": 3, "uuid": "GPU-8f3c", "pci_bus_id": "00000000:06:00.0",
                  "share": 0.25, "memory_quota": 35788000000, "logical": False},
                 {"local": 1, "index": 5, "uuid": "GPU-77aa", "pci_bus_id": "00000000:0A:00.0",
                  "share": 1, "memory_quota": 143000000000, "logical": False}]
        out, _, _ = self.run_script("""
            g = libtune.gpus()
            try:
                g[0].share = 1.0
                frozen = False
            except AttributeError:
                frozen = True
            print(json.dumps({"gpus": [x._asdict() for x in g], "ids": libtune.device_ids(),
                              "frozen": frozen, "types": [type(x.share).__name__ for x in g]}))
        """, self.env(TUNE_TRIAL_GPUS=json.dumps(cards), TUNE_GPU_MEMORY_QUOTA="35788000000"))
        got = json.loads(out)
        self.assertEqual(got["gpus"], cards)
        self.assertEqual(got["ids"], [0, 1])
        self.assertTrue(got["frozen"])
        self.assertEqual(got["types"], ["float", "float"])

    def test_no_cards(self):
        for value in (None, "[]"):
            out, _, _ = self.run_script("print(json.dumps([libtune.gpus(), libtune.device_ids()]))",
                                        self.env(TUNE_TRIAL_GPUS=value))
            self.assertEqual(json.loads(out), [[], []])

    def test_malformed_environment_fails_on_first_use_naming_the_variable(self):
        script = """
            import libtune  # never fails
            def attempt(f, *a, **kw):
                try:
                    f(*a, **kw)
                    return "no error"
                except Exception as e:
                    return "%s: %s" % (type(e).__name__, e)
            print(json.dumps({"config": [attempt(libtune.config), attempt(libtune.config)],
                              "gpus": attempt(libtune.gpus), "ids": attempt(libtune.device_ids),
                              "report": attempt(libtune.report, x=1)}))
        """
        cases = [
            ({"TUNE_TRIAL_CONFIG": "[1, 2]"}, "config", "ValueError: TUNE_TRIAL_CONFIG must be a JSON object"),
            ({"TUNE_TRIAL_CONFIG": "{not json"}, "config", "ValueError: TUNE_TRIAL_CONFIG is not valid JSON"),
            ({"TUNE_TRIAL_GPUS": '{"uuid": "GPU-1"}'}, "gpus", "ValueError: TUNE_TRIAL_GPUS must be a JSON list"),
            ({"TUNE_TRIAL_GPUS": "[3]"}, "gpus", "ValueError: TUNE_TRIAL_GPUS entry 0 must be a JSON object"),
            ({"TUNE_TRIAL_GPUS": '[{"local": 0}]'}, "gpus", 'ValueError: TUNE_TRIAL_GPUS entry 0 has no "uuid"'),
            ({"TUNE_TRIAL_GPUS": '[{"uuid": "G", "memory_quota": "big"}]'}, "ids",
             "ValueError: TUNE_TRIAL_GPUS entry 0: 'memory_quota' must be an integer"),
            ({"TUNE_REPORT_FD": "three"}, "report", "ValueError: TUNE_REPORT_FD must be a file descriptor number"),
        ]
        for extra, key, expected in cases:
            with self.subTest(extra=extra):
                out, _, report = self.run_script(script, self.env(**extra))
                got = json.loads(out)
                value = got[key][0] if key == "config" else got[key]
                self.assertTrue(value.startswith(expected), value)
                if key == "config":
                    self.assertEqual(got["config"][1], value)  # the next call says it again
                self.assertEqual(report, b"" if key == "report" else report)

    def test_no_report_fd_or_closed_fd(self):
        script = """
            try:
                libtune.report(x=1)
            except libtune.ReportError as e:
                print(e)
        """
        out, _, _ = self.run_script(script, self.env(), report_pipe=False)
        self.assertIn("cannot report to the libtune node: TUNE_REPORT_FD is not set", out)
        out, _, _ = self.run_script(script, self.env(TUNE_REPORT_FD="97"), report_pipe=False)
        self.assertIn("cannot report to the libtune node: writing to fd 97 (TUNE_REPORT_FD) failed", out)
        self.assertIn("Bad file descriptor", out)


class Reports(TrialTestCase):
    def test_exact_lines_and_return_value(self):
        out, _, report = self.run_script("""
            r = [libtune.report(val_acc=0.91, loss=0.3),
                 libtune.report({"metrics": 1, "iteration": 2.5}, step=7),
                 libtune.report({"a": 1e-05}),
                 libtune.report(naïve=1)]
            libtune.done("all good")
            print(json.dumps(r))
        """)
        self.assertEqual(json.loads(out), [True] * 4)
        self.assertEqual(report, (
            '{"type": "result", "iteration": 1, "metrics": {"val_acc": 0.91, "loss": 0.3}}\n'
            '{"type": "result", "iteration": 2, "metrics": {"metrics": 1, "iteration": 2.5, "step": 7}}\n'
            '{"type": "result", "iteration": 3, "metrics": {"a": 1e-05}}\n'
            '{"type": "result", "iteration": 4, "metrics": {"naïve": 1}}\n'
            '{"type": "done", "message": "all good"}\n').encode("utf-8"))

    def test_iteration_counting_auto_and_explicit(self):
        _, _, report = self.run_script("""
            libtune.report(x=1)
            libtune.report(x=2)
            libtune.report(x=3, iteration=10)
            libtune.report(x=4)
            libtune.report(x=5, iteration=5)
            libtune.report(x=6)
        """)
        self.assertEqual([l["iteration"] for l in self.lines(report)], [1, 2, 10, 11, 5, 6])

    def test_counting_after_restore(self):
        cases = [(os.path.join(self.trial_dir, "checkpoints", "7"), 7, 8),
                 (os.path.join(self.tmp, "trials", "trial-00001", "restore", "12") + "/", 12, 13),
                 (os.path.join(self.tmp, "somewhere", "latest"), None, 1)]
        for restore, iteration, first in cases:
            with self.subTest(restore=restore):
                out, _, report = self.run_script("""
                    print(json.dumps([libtune.restore_dir(), libtune.restore_iteration()]))
                    libtune.report(x=1)
                    libtune.report(x=2)
                    libtune.report(x=3, iteration=100)
                    libtune.report(x=4)
                """, self.env(TUNE_RESTORE_DIR=restore))
                self.assertEqual(json.loads(out), [restore, iteration])
                self.assertEqual([l["iteration"] for l in self.lines(report)], [first, first + 1, 100, 101])

    def test_bad_values_raise_and_write_nothing(self):
        out, _, report = self.run_script("""
            import math
            class Weird:
                pass
            attempts = [dict(metrics={"loss": "0.3"}), dict(metrics={"loss": b"1"}), dict(loss=None),
                        dict(loss=[1.0]), dict(loss=Weird()), dict(loss=1j), dict(ok=True),
                        dict(ok=False), dict(), dict(metrics={}), dict(metrics=[("a", 1)]),
                        dict(metrics={1: 2.0}), dict(metrics={"a": 1}, a=2), dict(a=1, iteration=0),
                        dict(a=1, iteration=True), dict(a=1, iteration=1.0), dict(a=1, iteration="3")]
            got = []
            for kw in attempts:
                try:
                    libtune.report(**kw)
                    got.append("no error")
                except (TypeError, ValueError) as e:
                    got.append("%s: %s" % (type(e).__name__, e))
            print(json.dumps(got))
        """)
        got = json.loads(out)
        expected = [
            "TypeError: metric 'loss' must be a number, not str", "TypeError: metric 'loss' must be a number, not bytes",
            "TypeError: metric 'loss' must be a number, not NoneType",
            "TypeError: metric 'loss' must be a number, not list",
            "TypeError: metric 'loss' must be a number, not Weird",
            "TypeError: metric 'loss' must be a",  # complex: no __float__ from 3.10 on
            "TypeError: metric 'ok' is a boolean", "TypeError: metric 'ok' is a boolean",
            "ValueError: report() needs at least one metric",
            "ValueError: report() needs at least one metric", "TypeError: metrics must be a dict",
            "TypeError: metric names must be non-empty strings",
            "ValueError: metric 'a' is given twice",
            "ValueError: iteration must be >= 1, not 0", "TypeError: iteration must be an integer, not bool",
            "TypeError: iteration must be an integer, not float", "TypeError: iteration must be an integer, not str",
        ]
        self.assertEqual(len(got), len(expected))
        for g, e in zip(got, expected):
            self.assertTrue(g.startswith(e), "%r does not start with %r" % (g, e))
        self.assertEqual(report, b"")

    def test_float_able_objects_are_accepted(self):
        out, _, report = self.run_script("""
            import decimal, fractions
            class Scalar:  # like a numpy scalar or a 0-dim torch tensor
                def __init__(self, v): self.v = v
                def __float__(self): return float(self.v)
            class IntScalar(Scalar):  # like numpy.int64: has __index__ too
                def __index__(self): return int(self.v)
            class FloatTensor(Scalar):  # a float tensor has __index__ but refuses it
                def __index__(self): raise TypeError("only integer tensors can be converted to an index")
            class BoolScalar(Scalar):  # like numpy.bool_: refused by its dtype
                dtype = "bool"
            libtune.report(a=Scalar(0.5), b=IntScalar(2 ** 60 + 1), c=FloatTensor(0.25),
                           d=fractions.Fraction(1, 4), e=decimal.Decimal("1.5"), f=7)
            errors = []
            for bad in (BoolScalar(1), Scalar(float("nan"))):
                try:
                    libtune.report(z=bad)
                except (TypeError, ValueError) as e:
                    errors.append("%s: %s" % (type(e).__name__, e))
            print(json.dumps(errors))
        """)
        self.assertEqual(report, b'{"type": "result", "iteration": 1, "metrics": {"a": 0.5, "b": '
                                 b'1152921504606846977, "c": 0.25, "d": 0.25, "e": 1.5, "f": 7}}\n'
                                 b'{"type": "result", "iteration": 2, "metrics": {"z": "nan"}}\n')
        errors = json.loads(out)
        self.assertEqual(len(errors), 1, errors)
        self.assertTrue(errors[0].startswith("TypeError: metric 'z' is a boolean"), errors)

    def test_non_finite_values_are_sent_as_text(self):
        _, _, report = self.run_script("""
            import math
            libtune.report(loss=float("nan"), up=math.inf, down=-math.inf, acc=0.1)
        """)
        self.assertEqual(self.lines(report), [{"type": "result", "iteration": 1,
                                               "metrics": {"loss": "nan", "up": "inf", "down": "-inf", "acc": 0.1}}])

    def test_threads_never_interleave_lines(self):
        # Lines of ~20 KB, far over PIPE_BUF (4 KiB): without the lock and the write
        # loop, the kernel would cut and mix them.
        threads, per_thread = 8, 60
        _, _, report = self.run_script("""
            import threading
            def work(t):
                for i in range(%d):
                    libtune.report({"t%%d_m%%03d" %% (t, k): float(i) for k in range(1000)})
            ts = [threading.Thread(target=work, args=(t,)) for t in range(%d)]
            for t in ts: t.start()
            for t in ts: t.join()
        """ % (per_thread, threads))
        lines = self.lines(report)
        self.assertEqual(len(lines), threads * per_thread)
        self.assertEqual([l["iteration"] for l in lines], list(range(1, threads * per_thread + 1)))
        for l in lines:
            names = list(l["metrics"])
            self.assertEqual(len(names), 1000)
            self.assertEqual(len({n.split("_")[0] for n in names}), 1)  # one thread's line, whole

    def test_broken_pipe_raises_a_clear_error(self):
        out, _, _ = self.run_script("""
            try:
                libtune.report(x=1)
            except libtune.ReportError as e:
                print(json.dumps([str(e), isinstance(e, RuntimeError), type(e.__cause__).__name__]))
        """, close_read_end=True)
        message, is_runtime_error, cause = json.loads(out)
        self.assertTrue(message.startswith("cannot report to the libtune node: "), message)
        self.assertIn("the node is gone", message)
        self.assertTrue(is_runtime_error)
        self.assertEqual(cause, "BrokenPipeError")


class Checkpoints(TrialTestCase):
    def test_checkpoint_dir_and_report(self):
        out, _, report = self.run_script("""
            d = libtune.checkpoint_dir(3)
            open(d + "/model.pt", "w").write("weights")
            again = libtune.checkpoint_dir(3)  # exists already: fine
            libtune.report_checkpoint(3)
            errors = []
            for f, arg in ((libtune.report_checkpoint, 4), (libtune.checkpoint_dir, -1),
                           (libtune.checkpoint_dir, "3"), (libtune.report_checkpoint, True)):
                try:
                    f(arg)
                except Exception as e:
                    errors.append("%s: %s" % (type(e).__name__, e))
            print(json.dumps([d, again, errors]))
        """)
        d, again, errors = json.loads(out)
        self.assertEqual(d, os.path.join(self.trial_dir, "checkpoints", "3"))
        self.assertEqual(again, d)
        self.assertTrue(os.path.isfile(os.path.join(d, "model.pt")))
        self.assertEqual(report, b'{"type": "checkpoint", "iteration": 3, "dir": "checkpoints/3"}\n')
        self.assertTrue(errors[0].startswith("FileNotFoundError: no checkpoint folder " +
                                             os.path.join(self.trial_dir, "checkpoints", "4")), errors[0])
        self.assertIn("libtune.checkpoint_dir(4)", errors[0])
        self.assertTrue(errors[1].startswith("ValueError: iteration must be >= 0"), errors[1])
        self.assertTrue(errors[2].startswith("TypeError: iteration must be an integer"), errors[2])
        self.assertTrue(errors[3].startswith("TypeError: iteration must be an integer"), errors[3])
        self.assertFalse(os.path.exists(os.path.join(self.trial_dir, "checkpoints", "4")))

    def test_checkpoint_zero_and_report_after_results(self):
        _, _, report = self.run_script("""
            libtune.report(loss=1.0)
            libtune.checkpoint_dir(0)
            libtune.report_checkpoint(0)
            libtune.report(loss=0.5)
        """)
        self.assertEqual([l["type"] for l in self.lines(report)], ["result", "checkpoint", "result"])
        self.assertEqual(self.lines(report)[1], {"type": "checkpoint", "iteration": 0, "dir": "checkpoints/0"})


class OutsideATrial(TrialTestCase):
    def test_everything_works_or_says_why(self):
        out, err, _ = self.run_script("""
            import signal
            r = [libtune.report(val_acc=0.5), libtune.report({"loss": 2}, iteration=4), libtune.report(loss=1)]
            libtune.done("bye")
            errors = []
            for f in (libtune.checkpoint_dir, libtune.report_checkpoint):
                try:
                    f(1)
                except RuntimeError as e:
                    errors.append(str(e))
            print(json.dumps({"r": r, "errors": errors, "config": libtune.config(),
                              "in_trial": libtune.in_trial(),
                              "ids": [libtune.trial_id(), libtune.node_id(), libtune.trial_dir()],
                              "restore": [libtune.restore_dir(), libtune.restore_iteration()],
                              "gpus": [libtune.gpus(), libtune.device_ids()], "stop": libtune.should_stop(),
                              "handler": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}))
        """, self.env(trial=False, TUNE_TRIAL_CONFIG='{"lr": 1}', TUNE_RESTORE_DIR="/x/checkpoints/3"),
            report_pipe=False)
        got = json.loads(out)
        self.assertEqual(got["r"], [True, True, True])
        self.assertEqual(got["config"], {})
        self.assertFalse(got["in_trial"])
        self.assertEqual(got["ids"], ["", "", ""])
        self.assertEqual(got["restore"], [None, None])
        self.assertEqual(got["gpus"], [[], []])
        self.assertFalse(got["stop"])
        self.assertTrue(got["handler"], "no SIGTERM handler outside a trial")
        self.assertEqual(len(got["errors"]), 2)
        for e in got["errors"]:
            self.assertIn("checkpoints need a trial", e)
        self.assertEqual(err.splitlines(), [
            'libtune: report (not running as a trial): {"type": "result", "iteration": 1, "metrics": {"val_acc": 0.5}}',
            'libtune: report (not running as a trial): {"type": "result", "iteration": 4, "metrics": {"loss": 2}}',
            'libtune: report (not running as a trial): {"type": "result", "iteration": 5, "metrics": {"loss": 1}}',
            'libtune: done (not running as a trial): {"type": "done", "message": "bye"}'])

    def test_limit_torch_memory_without_torch(self):
        out, _, _ = self.run_script("""
            sys.modules["torch"] = None  # as if torch were not installed
            try:
                libtune.limit_torch_memory()
            except ImportError as e:
                print(e)
        """)
        self.assertIn("libtune.limit_torch_memory() needs PyTorch", out)
        self.assertIn("install torch", out)


FAKE_TORCH = '''
"""A stand-in for torch: only what limit_torch_memory uses, recording the calls."""
import json, os
class _Props:
    def __init__(self, total): self.total_memory = total
class cuda:
    calls = []
    @staticmethod
    def is_available(): return int(os.environ.get("FAKE_CUDA_DEVICES", "0")) > 0
    @staticmethod
    def device_count(): return int(os.environ.get("FAKE_CUDA_DEVICES", "0"))
    @staticmethod
    def get_device_properties(i): return _Props(100 * 2 ** 30 + i)
    @staticmethod
    def set_per_process_memory_fraction(fraction, device): cuda.calls.append([fraction, device])
'''


class TorchMemory(TrialTestCase):
    def run_fake(self, cards, devices, headroom=None):
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "torch"), exist_ok=True)
        with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
            f.write(FAKE_TORCH)
        env = self.env(TUNE_TRIAL_GPUS=json.dumps(cards), FAKE_CUDA_DEVICES=str(devices))
        env["PYTHONPATH"] = SRC + os.pathsep + fake
        arg = "" if headroom is None else "headroom_bytes=%d" % headroom
        out, _, _ = self.run_script("""
            import torch
            print(json.dumps([libtune.limit_torch_memory(%s), torch.cuda.calls]))
        """ % arg, env)
        return json.loads(out)

    def test_fractions_below_the_quotas(self):
        total0, total1 = 100 * 2 ** 30, 100 * 2 ** 30 + 1
        cards = [{"local": 0, "index": 3, "uuid": "GPU-a", "share": 0.25, "memory_quota": 35788000000},
                 {"local": 1, "index": 4, "uuid": "GPU-b", "share": 1, "memory_quota": 0},
                 {"local": 2, "index": 5, "uuid": "GPU-c", "share": 1, "memory_quota": 500 * 2 ** 30}]
        fractions, calls = self.run_fake(cards, devices=2)  # the third card is not seen by CUDA
        f0 = (35788000000 - (1 << 30)) / total0
        self.assertEqual(fractions, [f0, 1.0])
        self.assertEqual(calls, [[f0, 0]])
        fractions, calls = self.run_fake([dict(cards[2], local=0), dict(cards[0], local=1)], devices=2, headroom=0)
        self.assertEqual(fractions, [1.0, 35788000000 / total1])  # capped at the whole card
        self.assertEqual(calls, [[1.0, 0], [35788000000 / total1, 1]])
        tiny = [{"local": 0, "uuid": "GPU-a", "memory_quota": 1000}]
        self.assertEqual(self.run_fake(tiny, devices=1), [[0.0], [[0.0, 0]]])

    def test_no_cuda_or_no_cards(self):
        card = [{"local": 0, "uuid": "GPU-a", "memory_quota": 10 ** 10}]
        self.assertEqual(self.run_fake(card, devices=0), [[], []])
        self.assertEqual(self.run_fake([], devices=1), [[], []])
        self.assertEqual(self.run_fake([dict(card[0], logical=True)], devices=1), [[], []])


class Stopping(TrialTestCase):
    def test_sigterm_ends_a_script_that_is_not_stop_aware(self):
        child = Child("""
            import atexit, time, libtune
            atexit.register(lambda: print("atexit ran", flush=True))
            try:
                i = 0
                while True:
                    i += 1
                    libtune.report(step=i)
                    time.sleep(0.05)
            finally:
                print("finally ran", flush=True)
                libtune.done("stopped")  # a report from a finally block still goes out
        """, self.env())
        child.wait_lines(2)
        start = time.monotonic()
        child.terminate_group()
        rc, out, err, report = child.finish(timeout=10)
        self.assertLess(time.monotonic() - start, 3.0, "it ended promptly")
        self.assertEqual(rc, 143, err)
        self.assertEqual(out.splitlines(), ["finally ran", "atexit ran"])
        self.assertNotIn("Traceback", err)
        lines = self.lines(report)
        self.assertEqual(lines[-1], {"type": "done", "message": "stopped"})
        self.assertEqual([l["iteration"] for l in lines[:-1]], list(range(1, len(lines))))

    def test_sigterm_while_sleeping_long(self):
        child = Child("""
            import time, libtune
            libtune.report(step=1)
            time.sleep(60)
        """, self.env())
        child.wait_lines(1)
        start = time.monotonic()
        child.terminate_group()
        rc, _, err, _ = child.finish(timeout=10)
        self.assertEqual(rc, 143, err)
        self.assertLess(time.monotonic() - start, 3.0)

    def test_a_stop_aware_script_finishes_on_its_own(self):
        child = Child("""
            import json, time, libtune
            steps = 0
            for i in range(1, 2000):
                if libtune.should_stop():
                    break
                libtune.report(step=i)
                steps = i
                time.sleep(0.05)
            last = libtune.report(final=steps)   # after the stop: written, and says False
            libtune.done("stopped after %d steps" % steps)
            print(json.dumps([steps, last, libtune.should_stop()]))
        """, self.env())
        child.wait_lines(3)
        child.terminate_group()
        rc, out, err, report = child.finish(timeout=10)
        self.assertEqual(rc, 0, err)
        steps, last, stop = json.loads(out)
        self.assertLess(steps, 1999)
        self.assertFalse(last)
        self.assertTrue(stop)
        lines = self.lines(report)
        self.assertEqual(lines[-2], {"type": "result", "iteration": steps + 1, "metrics": {"final": steps}})
        self.assertEqual(lines[-1], {"type": "done", "message": "stopped after %d steps" % steps})

    def test_report_returns_false_for_a_stop_aware_loop(self):
        child = Child("""
            import time, libtune
            libtune.should_stop()  # says: this script ends on its own
            n = 0
            while libtune.report(step=n + 1):
                n += 1
                time.sleep(0.05)
            print(n)
        """, self.env())
        child.wait_lines(2)
        child.terminate_group()
        rc, out, err, report = child.finish(timeout=10)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(self.lines(report)), int(out) + 1)

    def test_sigterm_during_a_long_write_leaves_the_line_whole(self):
        # A 5 MB line fills the pipe (nobody reads it yet), so the write is blocked in the
        # kernel when the signal comes; the exit waits for the line's last byte.
        child = Child("""
            import libtune
            libtune.report({"m%07d" % k: 0.5 for k in range(300000)})
            print("not reached", flush=True)
        """, self.env(), read_now=False)
        ready, _, _ = select.select([child.report_r], [], [], 20)
        self.assertTrue(ready, "the child started writing")
        time.sleep(0.3)  # the pipe is full: the child is blocked in write()
        child.terminate_group()
        time.sleep(0.2)
        child.start_reading()
        rc, out, err, report = child.finish(timeout=20)
        self.assertEqual(rc, 143, err)
        self.assertEqual(out, "")
        lines = self.lines(report)
        self.assertEqual(len(lines), 1)
        self.assertEqual(len(lines[0]["metrics"]), 300000)

    def test_a_handler_set_before_import_is_kept(self):
        out, _, _ = self.run_script("""
            import signal, os, time
            got = []
            def mine(s, f): got.append(s)
            signal.signal(signal.SIGTERM, mine)
            import libtune
            kept = signal.getsignal(signal.SIGTERM) is mine
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            print(json.dumps([kept, got, libtune.should_stop()]))
        """, prelude="import json\n")
        self.assertEqual(json.loads(out), [True, [signal.SIGTERM], False])
        out, _, _ = self.run_script("""
            import signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            import libtune
            print(json.dumps(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN))
        """, prelude="import json\n")
        self.assertTrue(json.loads(out))

    def test_no_handler_when_imported_outside_the_main_thread(self):
        out, _, _ = self.run_script("""
            import signal, threading
            t = threading.Thread(target=lambda: __import__("libtune"))
            t.start(); t.join()
            print(json.dumps(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL))
        """, prelude="import json\n")
        self.assertTrue(json.loads(out))

    def test_the_handler_is_installed_in_a_trial(self):
        out, _, _ = self.run_script("""
            import signal
            print(json.dumps(signal.getsignal(signal.SIGTERM) is libtune._on_sigterm))
        """)
        self.assertTrue(json.loads(out))


class PipInstall(TrialTestCase):
    """The wheel, installed by pip: the package, the tune program and the engine, and a
    trial that imports the package from there. `pip install ./python` builds the whole C++
    engine (minutes, scikit-build-core): ctest python_wheel builds the wheel once
    (python/build-wheel.sh) and runs these tests with LIBTUNE_TEST_WHEEL set to it."""

    def test_pip_install_the_wheel_then_import(self):
        wheel = os.environ.get("LIBTUNE_TEST_WHEEL")
        if not wheel:
            self.skipTest("LIBTUNE_TEST_WHEEL (a wheel from python/build-wheel.sh) is not set; ctest python_wheel sets it")
        if subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("pip is not available for " + sys.executable)
        target = os.path.join(self.tmp, "target")
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
                            "--no-input", "--target", target, wheel], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, cwd=self.tmp, timeout=300)
        self.assertEqual(p.returncode, 0, "pip install --target failed:\n" + p.stdout)
        env = self.env(TUNE_TRIAL_CONFIG='{"installed": true}')
        env["PYTHONPATH"] = target
        out, _, report = self.run_script("""
            from libtune._engine_path import tune_binary
            libtune.report(x=1)
            print(json.dumps([libtune.__file__, libtune.__version__, libtune.config(), tune_binary()]))
        """, env)
        path, version, cfg, tune = json.loads(out)
        self.assertTrue(path.startswith(target), path)
        self.assertEqual(version, "0.1.0")
        self.assertEqual(cfg, {"installed": True})
        self.assertEqual(self.lines(report), [{"type": "result", "iteration": 1, "metrics": {"x": 1}}])
        self.assertFalse(os.path.exists(os.path.join(target, "tests")))
        # The wheel's own tune program, which runs from there.
        self.assertEqual(tune, os.path.join(target, "libtune", "bin", "tune"))
        p = subprocess.run([tune, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "libtune " + version))


if __name__ == "__main__":
    unittest.main()
