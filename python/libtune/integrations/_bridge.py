"""The trackers' side of libtune's engine: ``tune run`` (and so the Python and C++ APIs,
which run it) starts ``python -m libtune.integrations._bridge`` when an experiment names
MLflow or Weights & Biases, and writes it one JSON object per line:

  {"op": "setup", "experiment": NAME, "dir": EXPERIMENT_DIR, "key": RUN_KEY,
   "trackers": [{"type": "mlflow", ...}, {"type": "wandb", ...}]}
  {"op": "start", "trial": ID, "config": {...}}
  {"op": "result", "trial": ID, "iteration": N, "time": SECONDS, "metrics": {...}}
  {"op": "checkpoint", "trial": ID, "iteration": N, "path": FOLDER}
  {"op": "end", "trial": ID, "state": "terminated" | "error" | "paused" | "pending", "error": TEXT}
  {"op": "best", "trial": ID}
  {"op": "close"}

Each trial is one run of each tracker. It answers on standard output, one JSON object a
line: {"warning": TEXT} for what a tracker could not do (the engine records and shows it;
the experiment goes on), {"run": {"trial", "tracker", "id", "url"}} for each run it made
(the dashboard links to it). A tracker that is not installed or cannot be reached is a
warning, and the others go on. The trackers' own logs go to standard error (the engine
keeps them in trackers/bridge.log)."""

import json
import os
import re
import select
import sys
import time

from ._trackers import flatten


class Unavailable(Exception):
    """This tracker cannot be used (not installed, not reachable, no credentials)."""


def _say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def warn(text):
    _say({"warning": text})


def numbers(metrics):
    return {k: float(v) for k, v in flatten(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class MLflow:
    name = "MLflow"

    def __init__(self, opts, setup):
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise Unavailable(f"MLflow is not installed for {sys.executable} ({e}): pip install mlflow there, or set "
                              f"tracker_python to an interpreter that has it") from None
        # An unreachable server is said at once, not after minutes of retries.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        if opts.get("tracking_token"):
            os.environ["MLFLOW_TRACKING_TOKEN"] = opts["tracking_token"]
        self.uri = opts.get("tracking_uri") or mlflow.get_tracking_uri()
        self.client = MlflowClient(tracking_uri=self.uri, registry_uri=opts.get("registry_uri") or None)
        from mlflow.entities import Metric, Param
        self.Metric, self.Param = Metric, Param
        self.experiment = opts.get("experiment_name") or setup["experiment"]
        try:
            found = self.client.get_experiment_by_name(self.experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
        except Exception as e:  # noqa: BLE001 - any failure of the store or server
            raise Unavailable(f"MLflow at {self.uri} cannot be used: {type(e).__name__}: {str(e)[:300]}") from None
        self.tags = {str(k): str(v) for k, v in (opts.get("tags") or {}).items()}
        self.key = re.sub(r"[^A-Za-z0-9_-]", "", setup.get("key", ""))
        self.save_artifact = bool(opts.get("save_artifact"))
        self.dir = setup.get("dir", "")
        self.runs = {}     # trial -> run id
        self.pending = {}  # run id -> [Metric]

    def _url(self, run_id):
        if self.uri.startswith(("http://", "https://")):
            return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{run_id}"
        return f"{self.uri} (mlflow ui --backend-store-uri {self.uri})"

    def start(self, trial, config):
        if trial in self.runs:
            return  # started again: the same run
        # A resumed experiment (the same folder, so the same key) continues its runs.
        found = self.client.search_runs([self.experiment_id], max_results=1, filter_string=(
            f"tags.trial_id = '{trial}' and tags.libtune_experiment = '{self.key}'"))
        if found:
            run_id = found[0].info.run_id
            self.runs[trial] = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            tags = dict(self.tags, trial_id=trial, libtune_experiment=self.key)
            tags["mlflow.runName"] = trial
            run_id = self.client.create_run(self.experiment_id, run_name=trial, tags=tags).info.run_id
            self.runs[trial] = run_id
            params = [self.Param(k, str(v)[:6000]) for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):
                self.client.log_batch(run_id, params=params[i:i + 100])
        _say({"run": {"trial": trial, "tracker": "mlflow", "id": run_id, "url": self._url(run_id)}})

    def result(self, trial, iteration, t, metrics):
        run_id = self.runs.get(trial)
        if run_id is None:
            self.start(trial, {})
            run_id = self.runs[trial]
        stamp = int(t * 1000)
        batch = self.pending.setdefault(run_id, [])
        for k, v in numbers(metrics).items():
            batch.append(self.Metric(re.sub(r"[^\w\-. /]", "_", k), v, stamp, int(iteration)))
        if len(batch) >= 1000:
            self.flush()

    def flush(self):
        pending, self.pending = self.pending, {}
        for run_id, batch in pending.items():
            for i in range(0, len(batch), 1000):
                self.client.log_batch(run_id, metrics=batch[i:i + 1000])

    def checkpoint(self, trial, iteration, path):
        if self.save_artifact and trial in self.runs:
            self.client.log_artifacts(self.runs[trial], path, artifact_path=f"checkpoint_{int(iteration):06d}")

    def end(self, trial, state, error):
        if trial not in self.runs or state not in ("terminated", "error"):
            return
        self.flush()
        run_id = self.runs[trial]
        if error:
            self.client.set_tag(run_id, "error", error[:5000])
        self.client.set_terminated(run_id, "FINISHED" if state == "terminated" else "FAILED")

    def best(self, trial):
        if trial in self.runs:
            self.client.set_tag(self.runs[trial], "best_trial", "true")
            self.client.set_experiment_tag(self.experiment_id, "best_trial", trial)

    def close(self, open_trials):
        self.flush()
        if self.save_artifact:  # as Ray's: each trial's folder (its files are whole by now)
            for trial, run_id in self.runs.items():
                folder = os.path.join(self.dir, "trials", trial)
                if os.path.isdir(folder):
                    self.client.log_artifacts(run_id, folder, artifact_path="trial")
        for trial in open_trials:  # never ended for good: stopped with the experiment
            if trial in self.runs:
                self.client.set_terminated(self.runs[trial], "KILLED")


class Wandb:
    name = "Weights & Biases"

    def __init__(self, opts, setup):
        try:
            import wandb
        except ImportError as e:
            raise Unavailable(f"Weights & Biases (wandb) is not installed for {sys.executable} ({e}): pip install "
                              f"wandb there, or set tracker_python to an interpreter that has it") from None
        self.wandb = wandb
        opts = dict(opts)
        if opts.get("api_key_file"):
            try:
                with open(os.path.expanduser(opts.pop("api_key_file"))) as f:
                    os.environ["WANDB_API_KEY"] = f.read().strip()
            except OSError as e:
                raise Unavailable(f"Weights & Biases: cannot read api_key_file: {e}") from None
        if opts.get("api_key"):
            os.environ["WANDB_API_KEY"] = opts.pop("api_key")
        self.mode = opts.pop("mode", None) or os.environ.get("WANDB_MODE") or "online"
        if self.mode not in ("online", "offline", "disabled"):
            raise Unavailable(f"Weights & Biases: mode {self.mode!r}: give online, offline or disabled")
        if self.mode == "online" and not self._has_key():
            raise Unavailable("Weights & Biases: no API key (set WANDB_API_KEY, give api_key_file, or run `wandb "
                              "login`; or mode: offline, then `wandb sync`)")
        self.project = opts.pop("project", None) or setup["experiment"]
        self.group = opts.pop("group", None) or setup["experiment"]
        self.dir = opts.pop("dir", None) or setup["dir"]
        self.upload_checkpoints = bool(opts.pop("upload_checkpoints", False))
        self.log_config = bool(opts.pop("log_config", False))  # Ray's: the config in every result too
        self.excludes = set(opts.pop("excludes", None) or ())
        self.init_timeout = float(opts.pop("init_timeout", 60))
        self.extra = opts  # entity, tags, notes, job_type, ...: wandb.init's own
        self.key = setup.get("key", "")
        self.runs = {}
        self.ids = {}
        self.started_at = {}
        self.configs = {}

    def _has_key(self):
        if os.environ.get("WANDB_API_KEY"):
            return True
        try:
            from wandb.sdk.lib import apikey
            return bool(apikey.api_key(settings=self.wandb.Settings()))
        except Exception:  # noqa: BLE001 - wandb's internals change; then let init say it
            return True

    def _init(self, trial, config, resume):
        run_id = self.ids.setdefault(trial, re.sub(r"[^A-Za-z0-9_-]", "_", f"{trial}-{self.key}")[:64])
        settings = self.wandb.Settings(init_timeout=self.init_timeout, silent=True, console="off")
        return self.wandb.init(project=self.project, group=self.group, name=trial, id=run_id, dir=self.dir,
                               mode=self.mode, config=config, resume=resume,
                               reinit="create_new", settings=settings, **self.extra)

    def start(self, trial, config):
        if trial in self.runs:
            return
        config = {k: v for k, v in config.items() if k not in self.excludes}
        self.configs[trial] = config
        try:
            run = self._init(trial, config, "allow")
        except Exception as e:  # noqa: BLE001 - init's failures (network, credentials) are this tracker's
            raise Unavailable(f"Weights & Biases: cannot start a run ({type(e).__name__}: {str(e)[:300]})") from None
        self.runs[trial] = run
        self.started_at[trial] = time.time()
        url = getattr(run, "url", None) or os.path.join(self.dir, "wandb")
        _say({"run": {"trial": trial, "tracker": "wandb", "id": run.id, "url": url}})

    def result(self, trial, iteration, t, metrics):
        run = self.runs.get(trial)
        if run is None:
            self.start(trial, {})
            run = self.runs[trial]
        data = {k: v for k, v in flatten(metrics).items() if k not in self.excludes}
        if self.log_config:
            data.update(flatten(self.configs.get(trial, {}), "config"))
        data["training_iteration"] = int(iteration)
        run.log(data, step=int(iteration))

    def flush(self):
        pass  # wandb writes in its own process

    def checkpoint(self, trial, iteration, path):
        run = self.runs.get(trial)
        if self.upload_checkpoints and run is not None:
            art = self.wandb.Artifact(name=re.sub(r"[^\w\-.]", "_", f"checkpoint_{trial}"), type="model",
                                      metadata={"iteration": int(iteration)})
            art.add_dir(path)
            run.log_artifact(art)

    def end(self, trial, state, error):
        if state not in ("terminated", "error"):
            return
        run = self.runs.pop(trial, None)
        if run is not None:
            if error:
                run.summary["error"] = error[:5000]
            run.finish(exit_code=0 if state == "terminated" else 1)

    def best(self, trial):
        if trial not in self.ids:
            return
        if trial not in self.runs:
            # Its run is resumed to be tagged. W&B names an offline run's folder by the
            # second it starts: one resumed within the same second would overwrite it.
            wait = self.started_at.get(trial, 0) + 1.1 - time.time()
            if wait > 0:
                time.sleep(wait)
        run = self.runs.get(trial) or self._init(trial, None, "allow")
        run.tags = tuple(run.tags or ()) + ("best",)
        run.summary["best_trial"] = True
        if trial not in self.runs:
            run.finish()

    def close(self, open_trials):
        for trial in list(self.runs):
            self.runs.pop(trial).finish(exit_code=1)


TRACKERS = {"mlflow": MLflow, "wandb": Wandb}


class Bridge:
    def __init__(self):
        self.trackers = []
        self.failures = {}
        self.open = set()

    def setup(self, msg):
        for spec in msg.get("trackers", []):
            kind = TRACKERS.get(spec.get("type"))
            if kind is None:
                warn(f"unknown tracker {spec.get('type')!r} (libtune has mlflow and wandb)")
                continue
            try:
                self.trackers.append(kind(spec.get("options") or {}, msg))
            except Unavailable as e:
                warn(str(e))
            except Exception as e:  # noqa: BLE001
                warn(f"{kind.name}: {type(e).__name__}: {str(e)[:300]}")
        _say({"ready": [t.name for t in self.trackers]})

    def each(self, op, *args):
        for t in list(self.trackers):
            try:
                getattr(t, op)(*args)
            except Unavailable as e:
                warn(f"{e}; its runs stop here")
                self.trackers.remove(t)
            except Exception as e:  # noqa: BLE001 - a tracker's failure is a warning, the rest go on
                n = self.failures[t.name] = self.failures.get(t.name, 0) + 1
                if n <= 3:
                    warn(f"{t.name}: {op} failed: {type(e).__name__}: {str(e)[:300]}")
                if n == 20:
                    warn(f"{t.name}: 20 failures; its runs stop here")
                    self.trackers.remove(t)

    def handle(self, msg):
        op = msg.get("op")
        trial = msg.get("trial")
        if op == "start":
            self.open.add(trial)
            self.each("start", trial, msg.get("config") or {})
        elif op == "result":
            self.each("result", trial, msg.get("iteration", 0), msg.get("time", time.time()), msg.get("metrics") or {})
        elif op == "checkpoint":
            self.each("checkpoint", trial, msg.get("iteration", 0), msg["path"])
        elif op == "end":
            if msg.get("state") in ("terminated", "error"):
                self.open.discard(trial)
            self.each("end", trial, msg.get("state"), msg.get("error") or "")
        elif op == "best":
            self.each("flush")
            self.each("best", trial)
        elif op == "close":
            self.each("close", sorted(self.open))
            return False
        return True


def main():
    bridge = Bridge()
    fd = sys.stdin.fileno()
    buf = b""
    started = False
    last_flush = time.monotonic()
    while True:
        ready, _, _ = select.select([fd], [], [], 1.0)
        chunk = os.read(fd, 1 << 20) if ready else None
        if chunk == b"":  # the engine went away: what is buffered, then the end
            bridge.each("flush")
            bridge.each("close", sorted(bridge.open))
            return 0
        if chunk:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    warn(f"the trackers' bridge got a line that is not JSON: {line[:200]!r}")
                    continue
                if not started:
                    started = True
                    bridge.setup(msg)
                    continue
                if not bridge.handle(msg):
                    return 0
        if time.monotonic() - last_flush >= 1.0:
            bridge.each("flush")
            last_flush = time.monotonic()


if __name__ == "__main__":
    sys.exit(main())
