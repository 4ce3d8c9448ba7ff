"""MLflow, with Ray Tune's names (ray.air.integrations.mlflow): MLflowLoggerCallback logs
every trial as an MLflow run from libtune's engine (docs/tracking.md); setup_mlflow,
inside a trial, starts a run of its own and returns the mlflow module."""

import os

from ._trackers import LoggerCallback, flatten, trial_context

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]


class MLflowLoggerCallback(LoggerCallback):
    """Each trial a run of MLflow: its config as params, its results as metrics at their
    training_iteration, FINISHED or FAILED, the best trial tagged ``best_trial``; with
    save_artifact, its checkpoints as artifacts. The engine logs them, with this
    Python's mlflow; one that is missing or a server that cannot be reached is a warning
    and the experiment goes on."""

    key = "mlflow"

    def __init__(self, tracking_uri=None, *, registry_uri=None, experiment_name=None, tags=None, tracking_token=None,
                 save_artifact=False):
        super().__init__()
        for name, value in (("tracking_uri", tracking_uri), ("registry_uri", registry_uri),
                            ("experiment_name", experiment_name)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"MLflowLoggerCallback({name}=...): give a str, not {type(value).__name__}")
            self._set(name, value)
        if tags is not None:
            if not isinstance(tags, dict):
                raise TypeError(f"MLflowLoggerCallback(tags=...): give a dict, not {type(tags).__name__}")
            self.options["tags"] = {str(k): str(v) for k, v in tags.items()}
        if tracking_token:
            self.env["MLFLOW_TRACKING_TOKEN"] = str(tracking_token)
        self._set("save_artifact", bool(save_artifact), False)


def setup_mlflow(config=None, tracking_uri=None, registry_uri=None, experiment_id=None, experiment_name=None,
                 tracking_token=None, artifact_location=None, run_name=None, create_experiment_if_not_exists=False,
                 tags=None, rank_zero_only=True):
    """Inside a trial: starts an MLflow run named after the trial (tagged with its id),
    logs ``config`` as its params and returns the ``mlflow`` module, as Ray's does. The
    experiment is ``experiment_id``, else ``experiment_name``, else libtune's
    experiment's name (made when missing). Settings under ``config["mlflow"]`` (Ray's
    older form) count where the arguments are not given, and are not logged."""
    try:
        import mlflow
    except ImportError as e:
        raise ImportError(f"setup_mlflow needs mlflow in the trial's Python ({e}): pip install mlflow") from None
    trial_id, trial_name, experiment = trial_context()
    config = dict(config or {})
    if isinstance(config.get("mlflow"), dict):  # Ray's older form: the settings under config["mlflow"]
        older = config.pop("mlflow")
        tracking_uri = tracking_uri or older.get("tracking_uri")
        registry_uri = registry_uri or older.get("registry_uri")
        experiment_id = experiment_id if experiment_id is not None else older.get("experiment_id")
        experiment_name = experiment_name or older.get("experiment_name")
        tracking_token = tracking_token or older.get("token") or older.get("tracking_token")
    if tracking_token:
        os.environ["MLFLOW_TRACKING_TOKEN"] = tracking_token
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    if registry_uri:
        mlflow.set_registry_uri(registry_uri)
    if experiment_id is not None:
        mlflow.set_experiment(experiment_id=experiment_id)
    else:
        name = experiment_name or experiment
        if experiment_name and not create_experiment_if_not_exists and mlflow.get_experiment_by_name(name) is None:
            raise ValueError(f"setup_mlflow: MLflow has no experiment {name!r}; give create_experiment_if_not_exists="
                             f"True to make it")
        if mlflow.get_experiment_by_name(name) is None:
            mlflow.create_experiment(name, artifact_location=artifact_location)
        mlflow.set_experiment(name)
    mlflow.start_run(run_name=run_name or trial_name, tags=dict(tags or {}, trial_id=trial_id))
    if config:
        mlflow.log_params({k: str(v)[:6000] for k, v in flatten(config).items()})
    return mlflow
