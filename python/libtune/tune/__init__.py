"""libtune.tune: Ray Tune's driver API on libtune's engine. ``from libtune import tune``
then ``tune.Tuner(...)``, ``tune.uniform(...)`` as with ``from ray import tune``
(docs/ray-tune.md). Inside a trial: report, get_checkpoint, get_context, Checkpoint.

Names are imported on first use (PEP 562): a trial that only reports does not pay for
the driver's modules (its start is part of every trial's)."""

import importlib

_WHERE = {
    "schedulers": None, "search": None, "logger": None, "stopper": None, "callback": None, "result": None,
    "experiment": None, "utils": None, "examples": None,
    "Callback": "callback", "Stopper": "stopper",
    "Tuner": "tuner",
    "TuneConfig": "config", "RunConfig": "config", "CheckpointConfig": "config", "FailureConfig": "config",
    "ResultGrid": "result_grid", "Result": "result_grid", "TrialError": "result_grid",
    "TuneError": "_engine",
    "ExperimentAnalysis": "analysis", "run": "analysis",
    "Trainable": "trainable", "with_resources": "trainable", "with_parameters": "trainable",
    "PlacementGroupFactory": "trainable",
    "Checkpoint": "_session", "TuneContext": "_session", "report": "_session", "get_checkpoint": "_session",
    "get_context": "_session",
}
for _name in ("uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint",
              "qlograndint", "choice", "grid_search", "sample_from"):
    _WHERE[_name] = "search.sample"

__all__ = list(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'libtune.tune' has no attribute {name!r}")
    module = _WHERE[name]
    if module is None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
