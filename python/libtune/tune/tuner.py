"""Ray Tune's ``Tuner`` on libtune's engine. ``fit()`` writes the experiment into its
folder (``tuner/experiment.json``, the file ``tune run`` reads, and
``tuner/trainable.pkl``, the trainable pickled with cloudpickle), runs libtune's ``tune
run`` on it (the same engine, placement, isolation, audit, schedulers, store, progress
and dashboard as every libtune experiment) and reads the results from the store. Each
trial runs ``python -m libtune.tune._function_trial`` with the driver's interpreter."""

import json
import math
import os
import sys
import time

from . import _engine
from .config import CheckpointConfig, RunConfig, TuneConfig
from .result_grid import ResultGrid
from .schedulers import PopulationBasedTraining, TrialScheduler
from ._driver import Driver, Hooks
from .search.sample import Holes, space_to_json
from .search.searcher import ConcurrencyLimiter, Searcher
from .stopper import native_parts
from .trainable import (PlacementGroupFactory, Trainable, TrialInfo, _check_trainable, is_user_path, script_dirs, trainable_name,
                        unwrap)

__all__ = ["Tuner"]

_TUNER_FOLDER = "tuner"
# What the trial runner needs besides the trainable, kept in tuner/tuner.json too, so
# that Tuner.restore gives a new pickle of the trainable the same options.
_RUNNER_OPTIONS = ("checkpoint_frequency", "checkpoint_at_end", "add_training_iteration", "max_iterations")
_FORWARDED_ENV = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH")


def _same(where, what, a, b):
    if a is not None and b is not None and a != b:
        raise ValueError(f"{where}: {what} is {a!r} in TuneConfig but {b!r} in the scheduler or search algorithm: "
                         f"set it in one place (TuneConfig)")
    return a if a is not None else b


def _stop_to_json(stop, metric, mode):
    """A stop dict (Ray's: a trial stops once a result reaches any value, ``>=``) as the
    experiment's ``stop``."""
    out, at_least = {}, {}
    for key, value in (stop or {}).items():
        if key == "done" and value is True:
            continue  # a result with done: True ends its trial anyway
        if not isinstance(key, str) or not key:
            raise ValueError(f"RunConfig(stop={{{key!r}: ...}}): give a reported metric's name")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"RunConfig(stop={{{key!r}: {value!r}}}): give a number (the trial stops once it "
                             f"reports {key} >= it)")
        if key == "training_iteration":
            out["max_iterations"] = max(1, math.ceil(value))
        elif key == "time_total_s":
            out["max_time_s"] = float(value)
        else:
            at_least[key] = float(value)  # as Ray: >= whatever the mode
    if at_least:
        out["at_least"] = at_least
    return out


def _find_unpicklable(obj, name, pickler, depth=0):
    """The name of the first part of obj that cannot be pickled (its closure, the
    globals it uses, its defaults, a class's attributes), or name itself."""
    parts = []
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None)
    if code is not None:
        for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                parts.append((f"{name}'s closure variable {var!r}", cell.cell_contents))
            except ValueError:
                pass
        g = getattr(fn, "__globals__", {})
        for n in code.co_names:
            if n in g:
                parts.append((f"the global {n!r} that {name} uses", g[n]))
        for i, d in enumerate(fn.__defaults__ or ()):
            parts.append((f"{name}'s default argument {i}", d))
    elif isinstance(obj, type):
        for n, v in vars(obj).items():
            if not n.startswith("__"):
                parts.append((f"{name}.{n}", v))
    elif isinstance(obj, dict):
        parts = [(f"{name}[{k!r}]", v) for k, v in obj.items()]
    for label, part in parts:
        try:
            pickler(part)
        except Exception:
            return _find_unpicklable(part, label, pickler, depth + 1) if depth < 2 else label
    return name


def _by_value_modules():
    """The driver's own modules (not the interpreter's, not an installed package's):
    pickled by value, so a trial needs no copy of them (it may run on another machine)."""
    out = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name != "__main__" and "." not in name and is_user_path(path):
            out.append(name)  # a package's submodules go with it
    return out


def _pickle(payload, where):
    try:
        import cloudpickle
    except ImportError:
        raise ImportError(f"{where}: libtune sends the trainable to its trials with cloudpickle, which is not "
                          f"installed: pip install cloudpickle (the wheel installs it)") from None
    registered = []
    for name in _by_value_modules():
        try:
            cloudpickle.register_pickle_by_value(sys.modules[name])
            registered.append(name)
        except (ValueError, AttributeError):
            pass
    try:
        try:
            return cloudpickle.dumps(payload)
        except Exception as e:
            named = _find_unpicklable(payload["trainable"], payload["name"], cloudpickle.dumps)
            for key, value in payload["parameters"].items():
                try:
                    cloudpickle.dumps(value)
                except Exception:
                    named = f"with_parameters' {key!r}"
                    break
            raise TypeError(f"{where}: {named} cannot be pickled ({type(e).__name__}: {e}), so it cannot be sent "
                            f"to the trials: create it inside the trainable (from its config), or pass what it "
                            f"is made from") from e
    finally:
        for name in registered:
            try:
                cloudpickle.unregister_pickle_by_value(sys.modules[name])
            except (ValueError, KeyError):
                pass


def _default_name(trainable):
    return f"{trainable_name(trainable)}_{time.strftime('%Y-%m-%d_%H-%M-%S', time.gmtime())}"


def _storage(run_config):
    base = run_config.storage_path or os.path.join("~", "libtune_results")
    return os.path.abspath(os.path.expanduser(os.fspath(base)))


def _new_folder(path):
    """``path``, or when it already holds an experiment (a script run again with the
    same RunConfig name) ``path-2``, ``path-3``, ...: nothing of the old one is touched,
    and where the new one goes is said."""
    candidate, n = path, 1
    while True:
        try:
            os.makedirs(candidate, exist_ok=True)
            os.mkdir(os.path.join(candidate, _TUNER_FOLDER))  # taken atomically: two drivers never share one
            break
        except FileExistsError:
            n += 1
            candidate = f"{path}-{n}"
    if candidate != path:
        sys.stderr.write(f"libtune: {path} already holds an experiment (Tuner.restore({path!r}, trainable) continues "
                         f"it); this one goes to {candidate}\n")
    return candidate


class Tuner:
    """Ray's ``tune.Tuner``: ``Tuner(trainable, param_space=, tune_config=,
    run_config=).fit()`` returns a ResultGrid."""

    def __init__(self, trainable=None, *, param_space=None, tune_config=None, run_config=None, _tuner_kwargs=None,
                 _tuner_internal=None, _entrypoint=None):
        if _tuner_kwargs or _tuner_internal or _entrypoint:
            raise TypeError("Tuner: _tuner_kwargs, _tuner_internal and _entrypoint are Ray's internals; leave them out")
        if trainable is None:
            raise TypeError("Tuner: give the trainable: a function of its config, or a Trainable class")
        _check_trainable(unwrap(trainable)[0], "Tuner")
        if param_space is not None and not isinstance(param_space, dict):
            raise TypeError(f"Tuner(param_space=...): give a dict of parameter names to values and tune's domains, "
                            f"e.g. {{'lr': tune.loguniform(1e-4, 1e-1)}}, not {type(param_space).__name__}")
        if tune_config is not None and not isinstance(tune_config, TuneConfig):
            raise TypeError(f"Tuner(tune_config=...): give a tune.TuneConfig, not {type(tune_config).__name__}")
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise TypeError(f"Tuner(run_config=...): give a tune.RunConfig (or train.RunConfig), not "
                            f"{type(run_config).__name__}")
        self._trainable = trainable
        self._space = param_space or {}
        self._tune_config = tune_config or TuneConfig()
        self._run_config = run_config or RunConfig()
        self._path = None
        self._results = None
        self._resume = False
        self._restored = None

    # -- the experiment ----------------------------------------------------------------

    def _plan(self):
        """(the experiment file's dict, the pickled payload's dict, metric, mode)."""
        if self._restored is not None:
            return _restored_plan(self)
        tc, rc = self._tune_config, self._run_config
        inner, resources, parameters = unwrap(self._trainable)
        name = trainable_name(inner)
        where = f"Tuner({name})"
        scheduler, search = tc.scheduler, tc.search_alg
        if scheduler is not None and not isinstance(scheduler, TrialScheduler):
            raise TypeError(f"TuneConfig(scheduler=...): give one of libtune.tune.schedulers' (ASHAScheduler, ...) "
                            f"or a subclass of tune.schedulers.TrialScheduler, not {type(scheduler).__name__}")
        if search is not None and not isinstance(search, Searcher):
            raise TypeError(f"TuneConfig(search_alg=...): give one of libtune.tune.search's (OptunaSearch, "
                            f"TPESearch, ...) or a subclass of tune.search.Searcher, not {type(search).__name__}")
        metric, mode = tc.metric, tc.mode
        for other in (scheduler, search):
            if other is not None:
                if isinstance(other.metric, (list, tuple)) or isinstance(other.mode, (list, tuple)):
                    continue  # several objectives of Optuna's own, in the driver
                metric = _same("TuneConfig", "metric", metric, other.metric)
                mode = _same("TuneConfig", "mode", mode, other.mode)
        holes = Holes()
        space = space_to_json(self._space, holes=holes)
        experiment = {
            "name": rc.name or self._name,
            "command": [sys.executable, "-m", "libtune.tune._function_trial", "trainable.pkl"],
            "working_dir": ".",
            "experiment_dir": None,  # set by fit(): the experiment folder, which holds this file
            "num_samples": tc.num_samples,
            "space": space,
            "progress": "none" if rc.verbose == 0 else ("table" if sys.stderr.isatty() else "lines"),
            "env": {k: None for k in _FORWARDED_ENV if k in os.environ},
        }
        from .. import _cluster
        experiment["env"].update(_cluster.env_vars())
        if not _cluster.log_to_driver():
            experiment["log_to_driver"] = False
        experiment["env"]["LIBTUNE_EXPERIMENT_NAME"] = experiment["name"]
        for folder in script_dirs():
            experiment["command"] += ["--sys-path", folder]
        if metric is not None and mode is None:
            raise ValueError(f"TuneConfig(metric={metric!r}): give mode='min' or mode='max' too (whether a higher "
                             f"{metric} is better)")
        no_metric = metric is None
        if no_metric:  # Ray runs without one; libtune's engine always tunes one
            experiment["metric"], experiment["mode"] = "training_iteration", "max"
        else:
            experiment["metric"], experiment["mode"] = metric, mode
        resources_fn = None
        if isinstance(resources, PlacementGroupFactory):
            experiment["bundles"] = resources.bundles
            experiment["strategy"] = resources.strategy.lower()
        elif callable(resources) and not isinstance(resources, dict):
            resources_fn = resources  # each trial's, from its config, in the driver
        elif resources is not None:
            experiment["resources_per_trial"] = resources
        user_scheduler = None
        if scheduler is not None and scheduler._in_driver:
            user_scheduler = scheduler  # the engine runs FIFO; its decisions come from the driver
        elif scheduler is not None:
            experiment["scheduler"] = scheduler.to_json()
        limit = tc.max_concurrent_trials or 0
        user_searcher = None
        if search is not None:
            if search._in_driver:
                user_searcher = search.searcher if isinstance(search, ConcurrencyLimiter) else search
            else:
                experiment["search"] = search.to_json()
            if search.seed is not None:
                experiment["seed"] = search.seed
            if search.max_concurrent:
                limit = min(limit, search.max_concurrent) if limit else search.max_concurrent
        if limit:
            experiment["max_concurrent_trials"] = limit
        if tc.time_budget_s is not None:
            experiment["time_budget_s"] = tc.time_budget_s
        user_stoppers = []
        if isinstance(rc.stop, dict):
            stop = _stop_to_json(rc.stop, metric, mode)
        else:
            stop = {}
            if rc.stop is not None:
                native, user_stoppers = native_parts(rc.stop)
                if native:
                    experiment["stoppers"] = native
        if stop:
            experiment["stop"] = stop
        if rc.failure_config.max_failures:
            experiment["max_failures"] = rc.failure_config.max_failures
        is_class = isinstance(inner, type) and issubclass(inner, Trainable)
        from ..integrations._trackers import experiment_keys, split_callbacks
        trackers, self._tracker_env = experiment_keys(rc.callbacks)
        experiment.update(trackers)
        # Ray's CSV, JSON and TensorBoard loggers are the trial files the engine writes.
        user_callbacks = [c for c in split_callbacks(rc.callbacks)[1] if not getattr(c, "_native", False)]
        observer = getattr(scheduler, "_observer", None)  # PB2's model learns from every result
        if observer is not None:
            scheduler._fill(metric, mode)
            user_callbacks.append(observer)
        if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1":  # Ray's switch for its default loggers
            experiment["trial_files"] = False
        if tc.reuse_actors:  # as Ray 2.60, off by default
            experiment["reuse_workers"] = True
        cc = rc.checkpoint_config or CheckpointConfig()
        if not is_class and (cc.checkpoint_frequency or cc.checkpoint_at_end):
            raise ValueError(f"{where}: CheckpointConfig(checkpoint_frequency, checkpoint_at_end) are for Trainable "
                             f"classes; a function checkpoints itself with tune.report(metrics, checkpoint=...)")
        if cc.num_to_keep is not None:  # Ray's default: every checkpoint kept
            keep = {"num_to_keep": cc.num_to_keep}
            if cc.checkpoint_score_attribute is not None:
                keep["score_attribute"] = cc.checkpoint_score_attribute
                keep["score_order"] = cc.checkpoint_score_order
            experiment["checkpoints"] = keep
        every = cc.checkpoint_frequency
        if is_class and not every and isinstance(scheduler, PopulationBasedTraining):
            every = scheduler.to_json().get("perturbation_interval", 1)  # PBT's exploit needs a checkpoint
        payload = {"trainable": inner, "parameters": parameters, "name": name,
                   "checkpoint_frequency": every, "checkpoint_at_end": bool(cc.checkpoint_at_end),
                   "add_training_iteration": no_metric, "trial_name_creator": tc.trial_name_creator,
                   "max_iterations": stop.get("max_iterations"),
                   "experiment_name": experiment["name"], "objects": holes.objects}
        pbt = scheduler if isinstance(scheduler, PopulationBasedTraining) else None
        self._hooks = Hooks(metric=metric, mode=mode, trainable_name=name, callbacks=user_callbacks,
                            stoppers=user_stoppers, searcher=user_searcher, scheduler=user_scheduler,
                            sample_from=holes.functions, resources_fn=resources_fn,
                            mutations=pbt._functions if pbt is not None else None,
                            explore_fn=pbt.custom_explore_fn if pbt is not None else None, stop=rc.stop,
                            space=self._space, trial_name_creator=tc.trial_name_creator,
                            dirname_creator=tc.trial_dirname_creator, objects=holes.objects)
        if self._hooks.any():
            experiment["driver"] = self._hooks.serves()
        return experiment, payload, metric, mode

    @property
    def _name(self):
        if not hasattr(self, "_default"):
            self._default = _default_name(self._trainable)
        return self._default

    def _write(self, path, experiment, payload, data, metric, mode):
        experiment["experiment_dir"] = path
        folder = os.path.join(path, _TUNER_FOLDER)
        os.makedirs(folder, exist_ok=True)
        settings = {"metric": metric, "mode": mode, **{k: payload[k] for k in _RUNNER_OPTIONS}}
        for file, body in (("trainable.pkl", data),
                           ("experiment.json", (json.dumps(experiment, indent=1) + "\n").encode()),
                           ("tuner.json", (json.dumps(settings) + "\n").encode())):
            temp = os.path.join(folder, f".{file}.tmp")
            with open(temp, "wb") as f:
                f.write(body)
            os.replace(temp, os.path.join(folder, file))
        return os.path.join(folder, "experiment.json")

    def fit(self):
        """Runs the experiment to its end and returns its ResultGrid. A bad argument is
        an error before any trial starts; trials that fail do not fail fit() (see
        ResultGrid.errors). Ctrl-C stops every trial and raises KeyboardInterrupt,
        leaving an experiment that Tuner.restore(path, trainable) continues."""
        experiment, payload, metric, mode = self._plan()
        data = _pickle(payload, f"Tuner({payload['name']})")  # before any folder is made
        if self._resume:
            path = self._path
        else:
            path = _new_folder(os.path.join(_storage(self._run_config), experiment["name"]))
        file = self._write(path, experiment, payload, data, metric, mode)
        hooks = getattr(self, "_hooks", None)
        if hooks is not None and hooks.any() and not self._resume:
            _write_hooks(path, hooks, payload["name"])
        self._path = path
        driver = Driver(hooks, path) if hooks is not None and hooks.any() else None
        try:
            _engine.run(file, resume=self._resume, quiet=experiment["progress"] == "none",
                        env=getattr(self, "_tracker_env", None),
                        fail_fast=self._run_config.failure_config.fail_fast, driver=driver)
        except _engine.TuneError:
            if driver is not None and driver.failed is not None:
                driver.raise_failure()  # the user's own exception, not the engine's account of it
            raise
        if driver is not None:
            driver.raise_failure()
        self._results = ResultGrid(path, metric, mode, _settings_known=True)
        creator = payload["trial_name_creator"]
        if creator is not None:
            for r in self._results:
                r.trial_name = str(creator(TrialInfo(r.trial_id, r.config, payload["name"], experiment["name"])))
        return self._results

    def get_results(self):
        """The ResultGrid of the last fit(), or of the restored experiment."""
        if self._results is None:
            if self._path and os.path.exists(os.path.join(self._path, "experiment.db")):
                settings = _settings(self._path)
                self._results = ResultGrid(self._path, settings.get("metric"), settings.get("mode"),
                                           _settings_known=True)
            else:
                raise RuntimeError("Tuner.get_results(): no results yet: call fit() first")
        return self._results

    @classmethod
    def can_restore(cls, path):
        """True when ``path`` holds an experiment that Tuner.fit() wrote."""
        path = os.path.expanduser(os.fspath(path))
        return os.path.exists(os.path.join(path, "experiment.db")) and \
            os.path.exists(os.path.join(path, _TUNER_FOLDER, "experiment.json"))

    @classmethod
    def restore(cls, path, trainable, resume_unfinished=True, resume_errored=False, restart_errored=False,
                param_space=None, storage_filesystem=None, _resume_config=None):
        """The experiment in ``path`` (interrupted, or its driver died), to continue with
        fit(): its finished trials and results are kept, the trials that were running
        start again from their latest checkpoints. Give the trainable again (the same
        code; its pickle is written anew)."""
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if not cls.can_restore(path):
            raise FileNotFoundError(f"Tuner.restore({path!r}): no experiment of Tuner.fit() there (it needs "
                                    f"experiment.db and {_TUNER_FOLDER}/experiment.json): give the folder that "
                                    f"ResultGrid.experiment_path named")
        if not resume_unfinished or resume_errored or restart_errored:
            raise ValueError("Tuner.restore: libtune continues the unfinished trials and keeps the errored ones as they "
                             "ended (resume_unfinished=True, resume_errored=False, restart_errored=False); other "
                             "choices are not supported")
        if storage_filesystem is not None or _resume_config is not None:
            raise ValueError("Tuner.restore: storage_filesystem is not supported (a local folder only)")
        with open(os.path.join(path, _TUNER_FOLDER, "experiment.json")) as f:
            experiment = json.load(f)
        if param_space is not None and space_to_json(param_space) != experiment["space"]:
            raise ValueError("Tuner.restore(param_space=...): a restored experiment keeps its search space; leave "
                             "param_space out (or give the same one)")
        settings = _settings(path)
        tuner = cls(trainable)
        tuner._path, tuner._resume = path, True
        tuner._restored = (experiment, settings)
        return tuner


def _settings(path):
    try:
        with open(os.path.join(path, _TUNER_FOLDER, "tuner.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_hooks(path, hooks, name):
    """The experiment's user code (callbacks, stoppers, searcher, ...) pickled beside it,
    for Tuner.restore, which gets only the trainable again."""
    import cloudpickle
    try:
        data = cloudpickle.dumps(hooks)
    except Exception as e:
        sys.stderr.write(f"libtune: Tuner({name})'s callbacks, stoppers, searcher or scheduler cannot be pickled "
                         f"({type(e).__name__}: {e}): Tuner.restore of this experiment will refuse to continue it\n")
        return
    temp = os.path.join(path, _TUNER_FOLDER, ".hooks_spec.pkl.tmp")
    with open(temp, "wb") as f:
        f.write(data)
    os.replace(temp, os.path.join(path, _TUNER_FOLDER, "hooks_spec.pkl"))


def _read_hooks(path):
    import pickle
    file = os.path.join(path, _TUNER_FOLDER, "hooks_spec.pkl")
    try:
        with open(file, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"Tuner.restore({path!r}): the experiment ran user code of its own (callbacks, a "
                                f"stopper, a searcher ...) that could not be kept ({file} is missing); it cannot "
                                f"continue without it") from None
    except Exception as e:
        raise RuntimeError(f"Tuner.restore({path!r}): {file} cannot be read ({type(e).__name__}: {e}); the code it "
                           f"needs must import as when the experiment started") from e


def _restored_plan(self):
    experiment, settings = self._restored
    inner, _, parameters = unwrap(self._trainable)
    name = trainable_name(inner)
    if "driver" in experiment:
        self._hooks = _read_hooks(self._path)
    payload = {"trainable": inner, "parameters": parameters, "name": name, "trial_name_creator": None,
               "experiment_name": experiment["name"], **{k: settings.get(k) for k in _RUNNER_OPTIONS}}
    if getattr(self, "_hooks", None) is not None:
        payload["objects"] = self._hooks.objects
        payload["trial_name_creator"] = self._hooks.trial_name_creator
    return experiment, payload, settings.get("metric"), settings.get("mode")

