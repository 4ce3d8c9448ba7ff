"""What the tracker integrations share: turning a logger callback into the experiment
file's keys (the engine runs the trackers: libtune.integrations._bridge), and the
trial's own session for setup_mlflow / setup_wandb."""

import os
import sys


class LoggerCallback:
    """A tracker that the engine feeds (MLflowLoggerCallback, WandbLoggerCallback): given
    to RunConfig(callbacks=[...]), it becomes the experiment's `mlflow:` or `wandb:` key,
    with this interpreter as `tracker_python`. Its code does not run in the driver."""

    key = None  # "mlflow" or "wandb"

    def __init__(self):
        self.options = {}
        self.env = {}  # secrets for the engine's environment, never written to a file

    def _set(self, name, value, default=None):
        if value is not default:
            self.options[name] = value

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


def experiment_keys(callbacks, where="RunConfig"):
    """The experiment file's keys and the environment the engine needs for these
    callbacks (a ValueError names one that libtune does not run)."""
    keys, env = {}, {}
    trackers, _ = split_callbacks(callbacks, where)
    for cb in trackers:
        if cb.key in keys:
            raise ValueError(f"{where}(callbacks=...): {type(cb).__name__} is given twice")
        keys[cb.key] = dict(cb.options)
        env.update(cb.env)
    if keys:
        keys["tracker_python"] = sys.executable
    return keys, env


def split_callbacks(callbacks, where="RunConfig"):
    """(the trackers libtune runs itself, the tune.Callbacks the driver runs); a
    TypeError names anything else."""
    from ..tune.callback import Callback
    trackers, others = [], []
    for cb in callbacks or ():
        if isinstance(cb, LoggerCallback):
            trackers.append(cb)
        elif isinstance(cb, Callback):
            others.append(cb)
        else:
            raise TypeError(f"{where}(callbacks=[{type(cb).__name__}(...)]): give tune.Callback objects (a subclass "
                            f"of libtune.tune.Callback, or ray.tune.logger's LoggerCallback) or the trackers' "
                            f"MLflowLoggerCallback and WandbLoggerCallback, not {type(cb).__name__}")
    return trackers, others


def flatten(d, prefix=""):
    """{"a": {"b": 1}} as {"a/b": 1} (under "prefix/" when given): Ray's names for nested
    configs and results, as tune.report flattens them."""
    from ..tune._session import flatten as into
    out = {}
    into(d or {}, f"{prefix}/" if prefix else "", out)
    return out


def trial_context():
    """(trial id, trial name, experiment name) inside a trial; outside one, a
    RuntimeError that says where these functions run."""
    from ..tune._session import get_context
    ctx = get_context()
    trial_id = ctx.get_trial_id()
    if not trial_id:
        raise RuntimeError("setup_mlflow / setup_wandb run inside a trial (the function that Tuner runs); outside "
                           "one, use mlflow or wandb directly")
    return trial_id, ctx.get_trial_name() or trial_id, ctx.get_experiment_name() or os.environ.get(
        "LIBTUNE_EXPERIMENT_NAME", "libtune")
