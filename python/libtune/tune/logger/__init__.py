"""Ray Tune's ``ray.tune.logger``: ``LoggerCallback`` for loggers of your own (they run in
the driver, docs/hooks.md), and the names of Ray's built-in loggers.

libtune writes every trial's ``progress.csv``, ``result.json``, ``params.json`` and
TensorBoard's event files itself, in the engine (docs/tracking.md): Ray's
``CSVLoggerCallback``, ``JsonLoggerCallback`` and ``TBXLoggerCallback`` given to
``RunConfig(callbacks=...)`` are those files, and no Python runs for them."""

import json
import numbers

from ..callback import Callback

__all__ = ["LoggerCallback", "CSVLoggerCallback", "JsonLoggerCallback", "TBXLoggerCallback", "pretty_print",
           "DEFAULT_LOGGERS"]


class LoggerCallback(Callback):
    """A Callback that logs: override ``log_trial_start(trial)``, ``log_trial_restore(trial)``,
    ``log_trial_save(trial)``, ``log_trial_result(iteration, trial, result)`` and
    ``log_trial_end(trial, failed=False)`` (or the Callback hooks themselves)."""

    def log_trial_start(self, trial):
        pass

    def log_trial_restore(self, trial):
        pass

    def log_trial_save(self, trial):
        pass

    def log_trial_result(self, iteration, trial, result):
        pass

    def log_trial_end(self, trial, failed=False):
        pass

    def on_trial_start(self, iteration, trials, trial, **info):
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration, trials, trial, **info):
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration, trials, trial, **info):
        self.log_trial_save(trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.log_trial_end(trial, failed=True)


class _Native(LoggerCallback):
    """One of the files libtune's engine writes for every trial (nothing runs here)."""

    _native = True

    def __init__(self, *args, **kwargs):
        pass


class CSVLoggerCallback(_Native):
    """Each trial's progress.csv (written by the engine)."""


class JsonLoggerCallback(_Native):
    """Each trial's result.json and params.json (written by the engine)."""


class TBXLoggerCallback(_Native):
    """Each trial's TensorBoard event files (written by the engine)."""


DEFAULT_LOGGERS = (JsonLoggerCallback, CSVLoggerCallback, TBXLoggerCallback)


def pretty_print(result, exclude=None):
    """A result as indented lines of ``key: value`` (Ray's pretty_print), without the
    keys in ``exclude``."""
    exclude = set(exclude or ())
    shown = {k: v for k, v in dict(result).items() if k not in exclude and v is not None}

    def plain(v):
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            return int(v)
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            return float(v)
        return v if isinstance(v, (str, bool)) or v is None else str(v)

    lines = []

    def walk(d, indent):
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(" " * indent + f"{k}:")
                walk(v, indent + 2)
            else:
                lines.append(" " * indent + f"{k}: {json.dumps(v) if isinstance(v, list) else v}")

    walk(plain(shown), 0)
    return "\n".join(lines) + "\n"
