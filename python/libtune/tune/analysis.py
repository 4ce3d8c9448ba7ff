"""Ray Tune's older entry point: ``tune.run(trainable, config=..., ...)`` returning an
``ExperimentAnalysis``. It builds the same Tuner (TuneConfig, RunConfig) and runs it."""

from .config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from .trainable import with_resources
from .tuner import Tuner

__all__ = ["run", "ExperimentAnalysis"]


class ExperimentAnalysis:
    """What tune.run returns: ``best_config``, ``best_result``, ``best_trial``,
    ``best_checkpoint``, ``get_best_trial``, ``get_best_config``, ``trials``,
    ``dataframe()``, ``results``, ``experiment_path``; over the same ResultGrid."""

    def __init__(self, grid, metric=None, mode=None):
        self._grid = grid
        self.default_metric, self.default_mode = metric, mode

    @property
    def experiment_path(self):
        return self._grid.experiment_path

    @property
    def trials(self):
        return list(self._grid)

    @property
    def results(self):
        return {r.trial_id: r.metrics for r in self._grid}

    def _need(self, metric, mode, what):
        metric = metric or self.default_metric
        mode = mode or self.default_mode
        if not metric or mode not in ("min", "max"):
            raise ValueError(f"ExperimentAnalysis.{what}: give metric= and mode= (or pass them to tune.run)")
        return metric, mode

    def get_best_trial(self, metric=None, mode=None, scope="last", filter_nan_and_inf=True):
        metric, mode = self._need(metric, mode, "get_best_trial")
        try:
            return self._grid.get_best_result(metric, mode, scope, filter_nan_and_inf)
        except RuntimeError:
            return None  # as Ray: no trial reported it

    def get_best_config(self, metric=None, mode=None, scope="last"):
        best = self.get_best_trial(metric, mode, scope)
        return best.config if best else None

    def get_best_checkpoint(self, trial, metric=None, mode=None):
        return trial.checkpoint

    @property
    def best_trial(self):
        return self.get_best_trial()

    @property
    def best_config(self):
        return self.get_best_config()

    @property
    def best_result(self):
        best = self.best_trial
        return best.metrics if best else None

    @property
    def best_checkpoint(self):
        best = self.best_trial
        return best.checkpoint if best else None

    @property
    def errors(self):
        return self._grid.errors

    def dataframe(self, metric=None, mode=None):
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def results_df(self):
        return self._grid.get_dataframe()

    def trial_dataframes(self):
        return {r.trial_id: r.metrics_dataframe for r in self._grid}


_RUN_UNSUPPORTED = {
    "local_dir": "storage_path", "keep_checkpoints_num": "checkpoint_config=CheckpointConfig(num_to_keep=...)",
    "checkpoint_score_attr": "checkpoint_config=CheckpointConfig(checkpoint_score_attribute=...)", "sync_config": None, "progress_reporter": None,
    "log_to_file": None, "trial_dirname_creator": None,
    "resume": "Tuner.restore(path, trainable)", "server_port": None,
    "export_formats": None, "restore": "Tuner.restore(path, trainable)",
}


def run(run_or_experiment, name=None, metric=None, mode=None, stop=None, time_budget_s=None, config=None,
        resources_per_trial=None, num_samples=1, storage_path=None, search_alg=None, scheduler=None,
        checkpoint_config=None, verbose=None, max_failures=0, max_concurrent_trials=None, reuse_actors=False,
        trial_name_creator=None, raise_on_failed_trial=True, fail_fast=False, callbacks=None, **kwargs):
    """Ray's ``tune.run``: runs the experiment and returns an ExperimentAnalysis. With
    raise_on_failed_trial (the default, as Ray) a failed trial raises a TuneError after
    the experiment ends."""
    for key in kwargs:
        instead = _RUN_UNSUPPORTED.get(key)
        if key in _RUN_UNSUPPORTED:
            raise TypeError(f"tune.run({key}=...) is not supported" + (f": use {instead}" if instead else ""))
        raise TypeError(f"tune.run() got an unexpected argument {key!r}")
    trainable = run_or_experiment
    if resources_per_trial is not None:
        trainable = with_resources(trainable, resources_per_trial)
    tuner = Tuner(trainable, param_space=config,
                  tune_config=TuneConfig(metric=metric, mode=mode, search_alg=search_alg, scheduler=scheduler,
                                         num_samples=num_samples, max_concurrent_trials=max_concurrent_trials,
                                         time_budget_s=time_budget_s, reuse_actors=reuse_actors,
                                         trial_name_creator=trial_name_creator),
                  run_config=RunConfig(name=name, storage_path=storage_path, stop=stop, verbose=verbose,
                                       callbacks=callbacks,
                                       failure_config=FailureConfig(max_failures=max_failures, fail_fast=fail_fast),
                                       checkpoint_config=checkpoint_config or CheckpointConfig()))
    grid = tuner.fit()
    if raise_on_failed_trial and grid.num_errors:
        from ._engine import TuneError
        first = grid.errors[0]
        raise TuneError(f"{grid.num_errors} of {len(grid)} trials failed (the first: {first}); the results are in "
                        f"{grid.experiment_path}. Pass raise_on_failed_trial=False to get them back instead")
    return ExperimentAnalysis(grid, metric, mode)
