"""An experiment's results under Ray Tune's names (``ResultGrid``, ``Result``), read from
its folder: the store (experiment.db, SQLite) that libtune's engine writes as results
come, the checkpoint copies (checkpoints/<trial>/<iteration>) and each failed trial's
standard error (trials/<trial>/stderr). pandas is needed only for the data frames."""

import json
import math
import os
import sqlite3

from ._session import Checkpoint, flatten

__all__ = ["ResultGrid", "Result", "TrialError"]

_SCOPES = ("last", "avg", "all", "last-5-avg", "last-10-avg")


class TrialError(RuntimeError):
    """A trial that ended in error: the message is its error headline (the exception it
    raised, or how its process ended); ``traceback`` is the end of its standard error."""

    def __init__(self, trial_id, headline, traceback=""):
        super().__init__(f"{trial_id}: {headline}")
        self.trial_id = trial_id
        self.headline = headline
        self.traceback = traceback


def _pandas(what):
    try:
        import pandas
    except ImportError:
        raise ImportError(f"{what} needs pandas, which is not installed: pip install pandas (or read Result.metrics, "
                          f"ResultGrid's trials and the experiment's results.csv without it)") from None
    return pandas


def _number(value):
    if isinstance(value, str):  # the store keeps NaN and the infinities as texts
        try:
            return float(value)
        except ValueError:
            return value
    return value


class Result:
    """One trial's outcome: ``metrics`` (its last result, with Ray's fields:
    training_iteration, trial_id, time_total_s, ...), ``config``, ``checkpoint`` (its
    newest kept checkpoint, or None), ``error`` (a TrialError, or None), ``path`` (its
    folder in the experiment), ``metrics_dataframe`` (every result; pandas),
    ``best_checkpoints``."""

    def __init__(self, grid, row, history):
        self._grid = grid
        self.trial_id = row["id"]
        self.config = row["config"]
        self.state = row["state"]
        self.info = row["info"]
        self._history = history
        self.trial_name = self.trial_id  # TuneConfig(trial_name_creator=...)'s name when it has one
        self.path = os.path.join(grid.experiment_path, "trials", self.trial_id)
        self.error = None
        if row["state"] == "error":
            self.error = TrialError(self.trial_id, row["error"] or "failed", _read(os.path.join(self.path, "stderr")))

    def _fields(self, i):
        """Result ``i`` of the history with Ray's fields."""
        r = self._history[i]
        i %= len(self._history)
        previous = self._history[i - 1]["time"] if i else self.info["created"]
        m = dict(r["metrics"])
        m.update({"training_iteration": r["iteration"], "trial_id": self.trial_id, "timestamp": int(r["time"]),
                  "time_total_s": r["time"] - self.info["created"], "time_this_iter_s": r["time"] - previous,
                  "done": self.state in ("terminated", "error") and i == len(self._history) - 1,
                  "pid": self.info.get("pid"), "node": self.info.get("node"), "config": self.config})
        return m

    def _row(self, i):
        """Result ``i`` as a data frame's row: the config flattened into config/... columns."""
        row = self._fields(i)
        flatten(row.pop("config"), "config/", row)
        return row

    @property
    def metrics(self):
        return self._fields(-1) if self._history else {}

    @property
    def metrics_dataframe(self):
        pandas = _pandas("Result.metrics_dataframe")
        return pandas.DataFrame([self._row(i) for i in range(len(self._history))])

    def _checkpoints(self):
        folder = os.path.join(self._grid.experiment_path, "checkpoints", self.trial_id)
        try:
            names = [n for n in os.listdir(folder) if n.isdigit()]
        except OSError:
            return []
        return sorted((int(n), os.path.join(folder, n)) for n in names)

    @property
    def checkpoint(self):
        found = self._checkpoints()
        return Checkpoint(found[-1][1], iteration=found[-1][0]) if found else None

    @property
    def best_checkpoints(self):
        """(Checkpoint, the metrics of its result) for each kept checkpoint."""
        by_iteration = {r["iteration"]: r for r in self._history}
        out = []
        for iteration, path in self._checkpoints():
            r = by_iteration.get(iteration)
            out.append((Checkpoint(path, iteration=iteration), dict(r["metrics"]) if r else {}))
        return out

    def __repr__(self):
        shown = {k: v for k, v in self.metrics.items() if k not in ("config",)}
        return f"Result(trial_id={self.trial_id!r}, metrics={shown!r}, config={self.config!r}, " \
               f"error={self.error!r}, path={self.path!r})"


def _read(path, limit=64 * 1024):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def open_store(experiment_path, timeout=5.0):
    """The experiment's store (experiment.db), opened read-only: the engine may be
    writing it. FileNotFoundError when there is none."""
    database = os.path.join(experiment_path, "experiment.db")
    if not os.path.exists(database):
        raise FileNotFoundError(f"{experiment_path} holds no experiment (no experiment.db): give the folder "
                                f"Tuner.fit() wrote (ResultGrid.experiment_path)")
    return sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=timeout)


def _load(experiment_path):
    db = open_store(experiment_path)
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
        trials = []
        for tid, config, state, error, info, created in db.execute(
                "SELECT id, config, state, error, info, created FROM trials ORDER BY id"):
            info = json.loads(info or "{}")
            info.setdefault("created", created)
            trials.append({"id": tid, "config": json.loads(config), "state": state, "error": error, "info": info})
        # PBT's exploits change a trial's configuration (the store's trials keep the
        # first): a Result's config is the one the trial ran with last, as Ray's.
        explored = {}
        for tid, body in db.execute("SELECT trial, body FROM events WHERE kind = 'exploit' ORDER BY seq"):
            config = json.loads(body).get("config")
            if isinstance(config, dict):
                explored[tid] = config
        for t in trials:
            if t["id"] in explored:
                t["config"] = explored[t["id"]]
        history = {t["id"]: [] for t in trials}
        for tid, iteration, when, metrics in db.execute(
                "SELECT trial, iteration, time, metrics FROM results ORDER BY trial, iteration"):
            values = {k: _number(v) for k, v in json.loads(metrics).items()}
            history.setdefault(tid, []).append({"iteration": iteration, "time": when, "metrics": values})
    finally:
        db.close()
    return meta, trials, history


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class ResultGrid:
    """The results of Tuner.fit(): ``len``, indexing and iteration give one Result per
    trial; ``get_best_result``, ``get_dataframe``, ``errors``, ``num_errors``,
    ``num_terminated``, ``experiment_path``."""

    def __init__(self, experiment_path, metric=None, mode=None, _settings_known=False):
        self.experiment_path = os.path.abspath(experiment_path)
        meta, trials, history = _load(self.experiment_path)
        known = _settings_known  # else the store's (tune run's experiments)
        self._metric = metric if metric is not None or known else meta.get("metric")
        self._mode = mode if mode is not None or known else meta.get("mode")
        self._results = [Result(self, t, history.get(t["id"], [])) for t in trials]

    @property
    def filesystem(self):
        return None

    def __len__(self):
        return len(self._results)

    def __getitem__(self, i):
        return self._results[i]

    def __iter__(self):
        return iter(self._results)

    @property
    def errors(self):
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self):
        return len(self.errors)

    @property
    def num_terminated(self):
        return sum(1 for r in self._results if r.state == "terminated")

    def _score(self, result, metric, scope):
        values = [r["metrics"].get(metric) for r in result._history]
        values = [v for v in values if _finite(v)]
        if not values:
            return None
        if scope == "last":
            last = result._history[-1]["metrics"].get(metric)
            return last if _finite(last) else None
        if scope in ("avg", "last-5-avg", "last-10-avg"):
            tail = values if scope == "avg" else values[-(5 if scope == "last-5-avg" else 10):]
            return sum(tail) / len(tail)
        return values  # all: the best of them, chosen by the caller

    def get_best_result(self, metric=None, mode=None, scope="last", filter_nan_and_inf=True):
        """The best trial's Result by ``metric`` (default: TuneConfig's) and ``mode``;
        ``scope``: last (its last result), avg, last-5-avg, last-10-avg, all (its best
        result). A RuntimeError names what is missing when no trial reported it."""
        metric = metric if metric is not None else self._metric
        mode = mode if mode is not None else self._mode
        if not metric or mode not in ("min", "max"):
            raise ValueError("get_best_result: give metric= and mode='min' or 'max' (or set them in TuneConfig)")
        if scope not in _SCOPES:
            raise ValueError(f"get_best_result: scope={scope!r}: use one of {', '.join(_SCOPES)}")
        best, best_value = None, None
        for r in self._results:
            score = self._score(r, metric, scope)
            if score is None:
                if not filter_nan_and_inf and r._history and metric in r._history[-1]["metrics"] and best is None:
                    best = r
                continue
            if scope == "all":
                score = max(score) if mode == "max" else min(score)
            if best_value is None or (score > best_value if mode == "max" else score < best_value):
                best, best_value = r, score
        if best is None:
            reported = sorted({k for r in self._results for h in r._history for k in h["metrics"]})
            raise RuntimeError(f"get_best_result: no trial reported {metric!r} as a finite number "
                               f"({len(self._results)} trials, {self.num_errors} in error; metrics reported: "
                               f"{', '.join(reported) or 'none'})")
        return best

    def get_dataframe(self, filter_metric=None, filter_mode=None):
        """One row per trial (pandas): its last result, or with ``filter_metric`` and
        ``filter_mode`` its best, with ``config/...`` columns and ``trial_id``."""
        pandas = _pandas("ResultGrid.get_dataframe")
        rows = []
        for r in self._results:
            if not r._history:
                continue
            pick = r._history[-1]
            if filter_metric:
                if filter_mode not in ("min", "max"):
                    raise ValueError("get_dataframe: filter_metric needs filter_mode='min' or 'max'")
                scored = [h for h in r._history if _finite(h["metrics"].get(filter_metric))]
                if scored:
                    pick = (max if filter_mode == "max" else min)(scored, key=lambda h: h["metrics"][filter_metric])
            row = r._row(r._history.index(pick))
            row["logdir"] = r.path
            rows.append(row)
        return pandas.DataFrame(rows)

    def __repr__(self):
        return f"ResultGrid<{len(self)} trials, {self.num_errors} errors, {self.experiment_path}>"
