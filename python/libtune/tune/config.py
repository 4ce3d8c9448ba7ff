"""Ray Tune's configuration objects (``TuneConfig``, ``RunConfig``, ``CheckpointConfig``,
``FailureConfig``) with Ray's argument names and defaults. Each argument either maps to
libtune's experiment or is refused, naming what to use instead; none is ignored."""

import datetime
import numbers

from ._checks import say_once, whole

__all__ = ["TuneConfig", "RunConfig", "CheckpointConfig", "FailureConfig"]


def _refuse(where, name, value, default, instead):
    if value is not default and value != default:
        raise ValueError(f"{where}({name}={value!r}) is not supported: {instead}")


class TuneConfig:
    """What to tune (Ray's ``tune.TuneConfig``): metric, mode, num_samples,
    max_concurrent_trials, time_budget_s, scheduler, search_alg, reuse_actors,
    trial_name_creator."""

    def __init__(self, mode=None, metric=None, search_alg=None, scheduler=None, num_samples=1,
                 max_concurrent_trials=None, time_budget_s=None, reuse_actors=False, trial_name_creator=None,
                 trial_dirname_creator=None, chdir_to_trial_dir="DEPRECATED"):
        where = "TuneConfig"
        if mode not in (None, "min", "max"):
            raise ValueError(f"{where}: mode must be 'min' or 'max', not {mode!r}")
        if metric is not None and (not isinstance(metric, str) or not metric):
            raise ValueError(f"{where}: metric must be a reported metric's name, not {metric!r} (libtune tunes one "
                             f"metric here; several objectives are tune run's `metrics`)")
        self.mode, self.metric = mode, metric
        self.search_alg, self.scheduler = search_alg, scheduler
        if num_samples == -1:
            raise ValueError(f"{where}: num_samples=-1 (sample until time_budget_s) is not supported: give a number of "
                             f"trials, with time_budget_s to stop earlier")
        self.num_samples = whole(where, "num_samples", num_samples, 1)
        self.max_concurrent_trials = whole(where, "max_concurrent_trials", max_concurrent_trials, 0, allow_none=True)
        if isinstance(time_budget_s, datetime.timedelta):
            time_budget_s = time_budget_s.total_seconds()
        if time_budget_s is not None and (isinstance(time_budget_s, bool) or
                                          not isinstance(time_budget_s, numbers.Real) or time_budget_s <= 0):
            raise ValueError(f"{where}: time_budget_s must be a number of seconds > 0 (or a timedelta), not "
                             f"{time_budget_s!r}")
        self.time_budget_s = time_budget_s
        if not isinstance(reuse_actors, bool):
            raise ValueError(f"{where}: reuse_actors must be True or False, not {reuse_actors!r}")
        self.reuse_actors = reuse_actors
        if trial_name_creator is not None and not callable(trial_name_creator):
            raise ValueError(f"{where}: trial_name_creator must be a function of the trial, not {trial_name_creator!r}")
        self.trial_name_creator = trial_name_creator
        if trial_dirname_creator is not None and not callable(trial_dirname_creator):
            raise ValueError(f"{where}: trial_dirname_creator must be a function of the trial, not "
                             f"{trial_dirname_creator!r}")
        # The trial's folder stays trials/<id>; this name links to it (the driver makes the link).
        self.trial_dirname_creator = trial_dirname_creator
        _refuse(where, "chdir_to_trial_dir", chdir_to_trial_dir, "DEPRECATED",
                "each trial runs in its own folder (tune.get_context().get_trial_dir()); Ray deprecated it too")


class CheckpointConfig:
    """Which checkpoints each trial keeps and how a Trainable class is checkpointed
    (Ray's ``CheckpointConfig``): num_to_keep (None: every one), ranked by
    checkpoint_score_attribute in checkpoint_score_order (the newest when there is no
    score attribute; the newest is always kept besides); checkpoint_frequency (every N
    iterations) and checkpoint_at_end for a Trainable class. A function trainable
    checkpoints itself (tune.report(..., checkpoint=)). Every checkpoint a trial
    reports is kept until this rule removes it."""

    def __init__(self, num_to_keep=None, checkpoint_score_attribute=None, checkpoint_score_order="max",
                 checkpoint_frequency=0, checkpoint_at_end=None, _checkpoint_keep_all_ranks="DEPRECATED",
                 _checkpoint_upload_from_workers="DEPRECATED"):
        where = "CheckpointConfig"
        if num_to_keep is not None:
            whole(where, "num_to_keep", num_to_keep, 1, allow_none=True)
        if checkpoint_score_attribute is not None and not isinstance(checkpoint_score_attribute, str):
            raise TypeError(f"{where}: checkpoint_score_attribute must be a metric's name (a str), not "
                            f"{checkpoint_score_attribute!r}")
        if checkpoint_score_order not in ("max", "min"):
            raise ValueError(f"{where}: checkpoint_score_order must be 'max' or 'min', not {checkpoint_score_order!r}")
        self.num_to_keep = num_to_keep
        self.checkpoint_score_attribute = checkpoint_score_attribute
        self.checkpoint_score_order = checkpoint_score_order
        self.checkpoint_frequency = whole(where, "checkpoint_frequency", checkpoint_frequency, 0)
        if checkpoint_at_end is not None and not isinstance(checkpoint_at_end, bool):
            raise ValueError(f"{where}: checkpoint_at_end must be True or False, not {checkpoint_at_end!r}")
        self.checkpoint_at_end = checkpoint_at_end


class FailureConfig:
    """How often a failed trial starts again from its latest checkpoint (Ray's
    ``FailureConfig``: max_failures; -1 is without limit)."""

    def __init__(self, max_failures=0, fail_fast=False):
        where = "FailureConfig"
        if max_failures == -1:
            max_failures = 1_000_000
        self.max_failures = whole(where, "max_failures", max_failures, 0)
        if fail_fast not in (False, True, "raise"):
            raise ValueError(f"{where}: fail_fast must be False, True or 'raise', not {fail_fast!r}")
        self.fail_fast = fail_fast  # the first failed trial stops the others; "raise": fit() raises its error


class RunConfig:
    """Where and how long (Ray's ``RunConfig``): name, storage_path, stop,
    failure_config, checkpoint_config, verbose. The experiment goes to
    ``<storage_path>/<name>``: by default ``~/libtune_results/<trainable>_<UTC time>``."""

    def __init__(self, name=None, storage_path=None, storage_filesystem=None, failure_config=None,
                 checkpoint_config=None, sync_config=None, verbose=None, stop=None, callbacks=None,
                 progress_reporter=None, log_to_file=False, local_dir=None):
        where = "RunConfig"
        if name is not None and (not isinstance(name, str) or not name or "/" in name):
            raise ValueError(f"{where}: name must be a folder name (no '/'), not {name!r}")
        self.name = name
        if local_dir is not None:
            raise ValueError(f"{where}(local_dir=...) is Ray's old name: use storage_path")
        self.storage_path = storage_path
        _refuse(where, "storage_filesystem", storage_filesystem, None,
                "libtune writes the experiment to a local folder (storage_path); a cluster's checkpoints are "
                "copied to it by the nodes")
        _refuse(where, "sync_config", sync_config, None,
                "the nodes copy every checkpoint to the experiment folder themselves; there is nothing to sync")
        _refuse(where, "progress_reporter", progress_reporter, None,
                "libtune's progress is a table on a terminal, lines otherwise (verbose=0: none)")
        _refuse(where, "log_to_file", log_to_file, False,
                "a failed trial's standard error is kept in <experiment>/trials/<id>/stderr")
        if callbacks:  # the trackers' (MLflowLoggerCallback, WandbLoggerCallback) and tune.Callback's
            from ..integrations._trackers import experiment_keys
            experiment_keys(callbacks, where)
        self.callbacks = list(callbacks or ())
        if failure_config is not None and not isinstance(failure_config, FailureConfig):
            raise TypeError(f"{where}: failure_config must be a FailureConfig, not {type(failure_config).__name__}")
        if checkpoint_config is not None and not isinstance(checkpoint_config, CheckpointConfig):
            raise TypeError(f"{where}: checkpoint_config must be a CheckpointConfig, not "
                            f"{type(checkpoint_config).__name__}")
        self.failure_config = failure_config or FailureConfig()
        self.checkpoint_config = checkpoint_config or CheckpointConfig()
        if isinstance(verbose, bool):
            verbose = int(verbose)  # Ray's examples pass verbose=False
        if verbose is not None and verbose not in (0, 1, 2, 3):
            raise ValueError(f"{where}: verbose must be 0, 1, 2 or 3, not {verbose!r}")
        self.verbose = verbose
        if stop is not None and not isinstance(stop, dict) and not callable(stop):
            raise ValueError(f"{where}(stop={stop!r}): give a dict ({{'training_iteration': N, '<metric>': "
                             f"threshold}}: a trial stops once a result reaches any of them), a function "
                             f"(trial_id, result) -> bool, or a tune.Stopper")
        self.stop = stop
