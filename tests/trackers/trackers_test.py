"""Where people look at their runs (issue 43): what `tune run` writes, read back by the
tools' own readers, run in the trackers' virtual environment (make_venv.sh):

- TensorBoard: every trial's folder through TensorBoard's EventAccumulator (each scalar
  at each step) and its HParams plugin (the session groups: hyperparameters, status);
- MLflow: a SQLite store through MlflowClient (a run per trial: params, metric history,
  status, the best trial's tag);
- Weights & Biases: offline run files (.wandb, read with W&B's own Record protobuf);
- an MLflow server that is not there, a Python without mlflow, a Python that is not
  there: a warning naming it, and the experiment completes with every result.

Usage: python trackers_test.py --tune PATH/TO/tune [unittest options]"""

import glob
import json
import os
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TUNE = None


def run_experiment(folder, extra, trials_python="python3"):
    """Runs `tune run` on an experiment of train.py with `extra` keys; (exit code, its
    JSON summary, stderr, the store's results by trial, the store's trials)."""
    exp_dir = os.path.join(folder, "exp")
    spec = {
        "name": "tracked",
        "command": [trials_python, "train.py"],
        "working_dir": HERE,
        "metric": "loss",
        "mode": "min",
        "space": {"lr": {"grid_search": [0.01, 0.1, 0.5]}, "fail": {"grid_search": [False, True]}, "epochs": 4},
        "experiment_dir": exp_dir,
        "progress": "lines",
    }
    spec.update(extra)
    path = os.path.join(folder, "experiment.yaml")
    with open(path, "w") as f:
        json.dump(spec, f)  # YAML reads JSON
    proc = subprocess.run([TUNE, "run", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                          cwd=folder)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1]) if lines else None
    db = sqlite3.connect(os.path.join(exp_dir, "experiment.db"))
    results = {}
    for trial, iteration, metrics in db.execute("SELECT trial, iteration, metrics FROM results ORDER BY trial, iteration"):
        results.setdefault(trial, []).append((iteration, json.loads(metrics)))
    trials = {tid: (json.loads(cfg), state) for tid, cfg, state in db.execute("SELECT id, config, state FROM trials")}
    events = [json.loads(body) for (body,) in db.execute("SELECT body FROM events WHERE kind = 'sink_warning'")]
    db.close()
    return proc.returncode, summary, proc.stderr, results, trials, events


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def key_of(item):
    """A W&B item's name: its key, or its nested key's parts."""
    return item.key or "/".join(item.nested_key)


def wandb_records(path):
    """The Records of a .wandb file: W&B's header (":W&B", 0xBEE1, version), then
    LevelDB's log format (32 KiB blocks of chunks: crc32c, length, type, data)."""
    from wandb.proto import wandb_internal_pb2 as pb
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", path
    out, pending, at, block = [], b"", 7, 32768
    while at + 7 <= len(data):
        left = block - at % block
        if left < 7:
            at += left
            continue
        length, kind = struct.unpack("<HB", data[at + 4:at + 7])
        chunk = data[at + 7:at + 7 + length]
        at += 7 + length
        if kind in (1, 2):
            pending = chunk
        else:
            pending += chunk
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(pending)
            out.append(r)
            pending = b""
    return out


class TrackersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="trackers_test_")
        folder = cls.tmp.name
        cls.mlflow_uri = "sqlite:///" + os.path.join(folder, "mlflow.db")
        cls.code, cls.summary, cls.stderr, cls.results, cls.trials, cls.warnings = run_experiment(folder, {
            "mlflow": {"tracking_uri": cls.mlflow_uri, "tags": {"team": "vision"}, "save_artifact": True},
            "wandb": {"mode": "offline", "project": "libtune-test", "tags": ["ci"], "upload_checkpoints": True},
            "tracker_python": sys.executable,
        })
        cls.exp_dir = os.path.join(folder, "exp")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_experiment_ran_with_failures_and_without_warnings(self):
        self.assertEqual(self.code, 0, self.stderr[-3000:])
        self.assertEqual(len(self.trials), 6)
        states = sorted(state for _, state in self.trials.values())
        self.assertEqual(states.count("error"), 3, states)
        self.assertEqual(states.count("terminated"), 3, states)
        self.assertEqual(self.warnings, [], self.stderr[-3000:])
        self.assertNotIn("warning", self.stderr)

    def test_tensorboard_reads_every_scalar_of_every_trial(self):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        for trial, rows in self.results.items():
            acc = EventAccumulator(os.path.join(self.exp_dir, "trials", trial))
            acc.Reload()
            self.assertEqual(sorted(acc.Tags()["scalars"]), ["acc", "grad_norm", "loss"], trial)
            for tag in ("loss", "acc", "grad_norm"):
                got = [(e.step, e.value) for e in acc.Scalars(tag)]
                self.assertEqual(got, [(it, f32(m[tag])) for it, m in rows], (trial, tag))

    def test_tensorboards_hparams_view_has_each_trials_config_and_end(self):
        from tensorboard import context
        from tensorboard.backend.event_processing import data_provider
        from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
        from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups
        m = pem.EventMultiplexer()
        m.AddRunsFromDirectory(self.exp_dir)
        m.Reload()
        tb = type("TBContext", (), {"data_provider": data_provider.MultiplexerDataProvider(m, self.exp_dir),
                                    "multiplexer": m, "logdir": self.exp_dir, "flags": None,
                                    "plugin_name_to_instance": {}})()
        ctx = backend_context.Context(tb)
        statuses = [api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING, api_pb2.STATUS_UNKNOWN]
        request = api_pb2.ListSessionGroupsRequest(experiment_name="", allowed_statuses=statuses, start_index=0,
                                                   slice_size=100)
        groups = list_session_groups.Handler(context.RequestContext(), ctx, "", request).run().session_groups
        self.assertEqual(len(groups), len(self.trials))
        for g in groups:
            self.assertEqual(len(g.sessions), 1)
            session = g.sessions[0]
            trial = session.name.split("/")[-1]
            config, state = self.trials[trial]
            hparams = {k: (v.number_value if v.HasField("number_value") else
                           v.bool_value if v.HasField("bool_value") else v.string_value)
                       for k, v in g.hparams.items()}
            self.assertEqual(hparams, {"lr": config["lr"], "fail": config["fail"], "epochs": config["epochs"]})
            want = api_pb2.STATUS_SUCCESS if state == "terminated" else api_pb2.STATUS_FAILURE
            self.assertEqual(session.status, want, trial)
            last = dict((mv.name.tag, mv.value) for mv in session.metric_values)
            self.assertAlmostEqual(last["loss"], f32(self.results[trial][-1][1]["loss"]), places=6)

    def test_progress_csv_and_result_json_hold_every_result(self):
        import csv
        for trial, rows in self.results.items():
            folder = os.path.join(self.exp_dir, "trials", trial)
            with open(os.path.join(folder, "progress.csv")) as f:
                csv_rows = list(csv.DictReader(f))
            self.assertEqual([(int(r["training_iteration"]), float(r["loss"])) for r in csv_rows],
                             [(it, m["loss"]) for it, m in rows])
            with open(os.path.join(folder, "result.json")) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([(r["training_iteration"], r["loss"], r["trial_id"]) for r in lines],
                             [(it, m["loss"], trial) for it, m in rows])
            with open(os.path.join(folder, "params.json")) as f:
                self.assertEqual(json.load(f), self.trials[trial][0])

    def test_mlflow_has_a_run_per_trial_with_params_metrics_status_and_the_best_tagged(self):
        from mlflow.tracking import MlflowClient
        client = MlflowClient(tracking_uri=self.mlflow_uri)
        exp = client.get_experiment_by_name("tracked")
        self.assertIsNotNone(exp)
        runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
        self.assertEqual(sorted(runs), sorted(self.trials))
        for trial, (config, state) in self.trials.items():
            run = runs[trial]
            self.assertEqual(run.data.params, {k: str(v) for k, v in config.items()})
            self.assertEqual(run.data.tags["team"], "vision")
            self.assertEqual(run.data.tags["trial_id"], trial)
            self.assertEqual(run.info.status, "FINISHED" if state == "terminated" else "FAILED", trial)
            history = client.get_metric_history(run.info.run_id, "loss")
            self.assertEqual(sorted((h.step, h.value) for h in history),
                             [(it, m["loss"]) for it, m in self.results[trial]])
        best = self.summary["best_trial"]
        self.assertEqual(runs[best].data.tags.get("best_trial"), "true")
        self.assertEqual([t for t, r in runs.items() if r.data.tags.get("best_trial")], [best])
        self.assertEqual(exp.tags.get("best_trial"), best)
        # save_artifact: its checkpoints' copies (iterations 2 and 4 of each that reached them).
        artifacts = [a.path for a in client.list_artifacts(runs[best].info.run_id)]
        self.assertIn("checkpoint_000002", artifacts)
        # ... and, as Ray's, the trial's folder at the end.
        folder = [a.path for a in client.list_artifacts(runs[best].info.run_id, "trial")]
        self.assertIn("trial/progress.csv", folder)
        self.assertTrue([p for p in folder if "events.out.tfevents" in p], folder)

    def test_wandb_offline_runs_hold_each_trials_config_history_and_exit(self):
        files = sorted(glob.glob(os.path.join(self.exp_dir, "wandb", "offline-run-*", "*.wandb")))
        seen = {}
        for path in files:
            records = wandb_records(path)
            run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
            self.assertEqual((run.project, run.run_group), ("libtune-test", "tracked"))
            config = {key_of(i): json.loads(i.value_json) for i in run.config.update if not key_of(i).startswith("_")}
            if config:  # the run's first start (the best trial's tag resumes it without one)
                self.assertEqual(config, self.trials[run.display_name][0])
            history = [dict({key_of(i): json.loads(i.value_json) for i in r.history.item}, step=r.history.step.num)
                       for r in records if r.WhichOneof("record_type") == "history"]
            exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
            tags = {t for r in records if r.WhichOneof("record_type") == "run" for t in r.run.tags}
            seen.setdefault(run.display_name, []).append((tags, history, exits))
        self.assertEqual(sorted(seen), sorted(self.trials))
        for trial, (config, state) in self.trials.items():
            tags, history, exits = seen[trial][0]
            self.assertEqual([(h["step"], h["loss"]) for h in history], [(it, m["loss"]) for it, m in self.results[trial]])
            self.assertEqual(exits, [0 if state == "terminated" else 1], trial)
        # upload_checkpoints: the checkpoints' copies as W&B artifacts of type model.
        artifacts = [r.artifact for path in files for r in wandb_records(path) if r.WhichOneof("record_type") == "artifact"]
        self.assertTrue(artifacts)
        self.assertEqual({a.type for a in artifacts}, {"model"})
        # The best trial: its run resumed at the end with the tag "best".
        self.assertIn("best", seen[self.summary["best_trial"]][-1][0])


# A Ray Tune script as Ray's MLflow example writes one (the logger callback on the driver,
# setup_mlflow inside the trial), with `ray` spelled `libtune`, and W&B's callback beside.
RAY_STYLE = """
import sys, mlflow
from libtune import train, tune
from libtune.air.integrations.mlflow import MLflowLoggerCallback, setup_mlflow
from libtune.air.integrations.wandb import WandbLoggerCallback

uri = sys.argv[1]

def evaluation_fn(step, width, height):
    return (0.1 + width * step / 100) ** (-1) + height * 0.1

def train_function(config):
    setup_mlflow(config, experiment_name="inside", tracking_uri=uri, create_experiment_if_not_exists=True)
    for step in range(5):
        score = evaluation_fn(step, config["width"], config["height"])
        mlflow.log_metrics({"mean_loss": score}, step=step)
        train.report({"iterations": step, "mean_loss": score})

# As Ray's example does: the experiment (and a new SQLite store) made in the driver, before
# trials open it at once (MLflow's first creation of a store is not safe from several).
mlflow.set_tracking_uri(uri)
mlflow.set_experiment("inside")

tuner = tune.Tuner(
    train_function,
    tune_config=tune.TuneConfig(num_samples=3, metric="mean_loss", mode="min"),
    run_config=train.RunConfig(name="ray_style", storage_path=sys.argv[2], verbose=0, callbacks=[
        MLflowLoggerCallback(tracking_uri=uri, experiment_name="callback"),
        WandbLoggerCallback(project="ray_style", mode="offline")]),
    param_space={"width": tune.randint(10, 100), "height": tune.randint(0, 100)},
)
print("best", tuner.fit().get_best_result().config)
"""


class PythonApiTest(unittest.TestCase):
    def test_a_ray_style_script_logs_through_the_callbacks_and_setup_mlflow(self):
        from mlflow.tracking import MlflowClient
        with tempfile.TemporaryDirectory(prefix="trackers_test_") as folder:
            script = os.path.join(folder, "ray_style.py")
            with open(script, "w") as f:
                f.write(RAY_STYLE)
            uri = "sqlite:///" + os.path.join(folder, "mlflow.db")
            env = dict(os.environ, LIBTUNE_TUNE=TUNE,
                       PYTHONPATH=os.path.join(HERE, "..", "..", "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
            proc = subprocess.run([sys.executable, "-W", "ignore", script, uri, folder], env=env, cwd=folder,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            self.assertIn("best {", proc.stdout)
            self.assertNotIn("warning", proc.stderr)
            client = MlflowClient(tracking_uri=uri)
            for name in ("callback", "inside"):  # the engine's runs, and the trials' own
                exp = client.get_experiment_by_name(name)
                runs = client.search_runs([exp.experiment_id])
                self.assertEqual(len(runs), 3, name)
                for run in runs:
                    self.assertEqual(len(client.get_metric_history(run.info.run_id, "mean_loss")), 5, name)
                    self.assertTrue(run.data.tags["trial_id"].startswith("trial-"), run.data.tags)
                    self.assertEqual(set(run.data.params), {"width", "height"})
            exp_dir = os.path.dirname(glob.glob(os.path.join(folder, "ray_style*", "experiment.db"))[0])
            runs = {os.path.basename(p).split("-", 3)[3]
                    for p in glob.glob(os.path.join(exp_dir, "wandb", "offline-run-*"))}
            self.assertEqual(len(runs), 3, runs)
            self.assertEqual(len(glob.glob(os.path.join(exp_dir, "trials", "*", "events.out.tfevents.*"))), 3)


class BridgeTest(unittest.TestCase):
    """The bridge's protocol itself (JSON lines in, warnings and runs out)."""

    def session(self, folder, lines):
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
        proc = subprocess.run([sys.executable, "-W", "ignore", "-m", "libtune.integrations._bridge"], env=env,
                              input="".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), capture_output=True, text=True,
                              timeout=120, cwd=folder)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        return [json.loads(line) for line in proc.stdout.splitlines()]

    def test_a_resumed_experiment_continues_its_mlflow_runs(self):
        from mlflow.tracking import MlflowClient
        with tempfile.TemporaryDirectory(prefix="trackers_test_") as folder:
            uri = "sqlite:///" + os.path.join(folder, "m.db")
            setup = {"op": "setup", "experiment": "resumed", "dir": folder, "key": "k1",
                     "trackers": [{"type": "mlflow", "options": {"tracking_uri": uri}}]}
            first = self.session(folder, [setup, {"op": "start", "trial": "t1", "config": {"lr": 0.1}},
                                          {"op": "result", "trial": "t1", "iteration": 1, "time": 1.0,
                                           "metrics": {"loss": 1.0}}, {"op": "close"}])
            # The program died; `tune resume` starts a bridge again with the same key.
            again = self.session(folder, [setup, {"op": "start", "trial": "t1", "config": {"lr": 0.1}},
                                          {"op": "result", "trial": "t1", "iteration": 2, "time": 2.0,
                                           "metrics": {"loss": 0.5}},
                                          {"op": "end", "trial": "t1", "state": "terminated"}, {"op": "close"}])
            runs = [m["run"]["id"] for m in first + again if "run" in m]
            self.assertEqual(len(runs), 2)
            self.assertEqual(runs[0], runs[1])
            self.assertFalse([m for m in first + again if "warning" in m])
            client = MlflowClient(tracking_uri=uri)
            self.assertEqual([(h.step, h.value) for h in client.get_metric_history(runs[0], "loss")], [(1, 1.0), (2, 0.5)])
            self.assertEqual(client.get_run(runs[0]).info.status, "FINISHED")

    def test_a_line_that_is_not_json_and_an_unknown_tracker_are_warnings(self):
        with tempfile.TemporaryDirectory(prefix="trackers_test_") as folder:
            out = self.session(folder, [{"op": "setup", "experiment": "x", "dir": folder,
                                         "trackers": [{"type": "neptune"}]}, "not json", {"op": "close"}])
            self.assertIn({"warning": "unknown tracker 'neptune' (libtune has mlflow and wandb)"}, out)
            self.assertIn({"warning": "the trackers' bridge got a line that is not JSON: b'not json'"}, out)


class UnavailableTrackersTest(unittest.TestCase):
    def check_completes(self, extra, said):
        with tempfile.TemporaryDirectory(prefix="trackers_test_") as folder:
            code, summary, stderr, results, trials, warnings = run_experiment(folder, extra)
            self.assertEqual(code, 0, stderr[-3000:])
            self.assertEqual(summary["results"], sum(len(r) for r in results.values()))
            self.assertEqual(sum(len(r) for r in results.values()), 3 * 4 + 3 * 2)
            self.assertTrue(any(said in w["warning"] for w in warnings), (said, warnings))
            self.assertIn(said, stderr)
            # TensorBoard's files are written whatever the trackers did.
            self.assertTrue(glob.glob(os.path.join(folder, "exp", "trials", "*", "events.out.tfevents.*")))

    def test_an_mlflow_server_that_is_not_there_is_a_warning_naming_it(self):
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        uri = f"http://127.0.0.1:{port}"
        self.check_completes({"mlflow": {"tracking_uri": uri}, "tracker_python": sys.executable}, f"MLflow at {uri}")

    def test_a_python_without_mlflow_is_a_warning_naming_it(self):
        plain = "/usr/bin/python3"
        if subprocess.run([plain, "-c", "import mlflow"], capture_output=True).returncode == 0:
            self.skipTest(f"{plain} has mlflow")
        self.check_completes({"mlflow": {}, "tracker_python": plain}, f"MLflow is not installed for {plain}")

    def test_a_python_that_is_not_there_is_a_warning_naming_it(self):
        self.check_completes({"wandb": {"mode": "offline"}, "tracker_python": "/no/such/python3"},
                             "cannot run the Python they need, /no/such/python3")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--tune" in args:
        i = args.index("--tune")
        TUNE = args[i + 1]
        del args[i:i + 2]
    TUNE = TUNE or os.environ.get("LIBTUNE_TUNE")
    if not TUNE:
        sys.exit("usage: trackers_test.py --tune PATH/TO/tune")
    unittest.main(argv=[sys.argv[0]] + args)
