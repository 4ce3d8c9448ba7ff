"""Weights & Biases, with Ray Tune's names (ray.air.integrations.wandb):
WandbLoggerCallback logs every trial as a W&B run from libtune's engine
(docs/tracking.md); setup_wandb, inside a trial, starts the trial's run and returns it."""

import os
import re

from ._trackers import LoggerCallback, trial_context

__all__ = ["WandbLoggerCallback", "setup_wandb"]

# wandb.init's arguments the engine passes on.
_INIT_KEYS = ("entity", "tags", "notes", "job_type", "mode", "dir", "init_timeout")


class WandbLoggerCallback(LoggerCallback):
    """Each trial a W&B run (project, group: the experiment's name unless given), its
    config as the run's config (without ``excludes``), each result logged at its
    training_iteration, its exit code, the best trial tagged ``best``; with
    upload_checkpoints, its checkpoints as ``model`` artifacts. Other keyword arguments
    are wandb.init's: entity, tags, notes, job_type, mode ("offline": then ``wandb
    sync``), dir, init_timeout."""

    key = "wandb"

    def __init__(self, project=None, group=None, api_key_file=None, api_key=None, excludes=None, log_config=False,
                 upload_checkpoints=False, save_checkpoints=False, upload_timeout=1800, **kwargs):
        super().__init__()
        self._set("project", project)
        self._set("group", group)
        if api_key_file:
            self.options["api_key_file"] = os.path.abspath(os.path.expanduser(api_key_file))
        if api_key:
            self.env["WANDB_API_KEY"] = str(api_key)
        if excludes:
            self.options["excludes"] = [str(e) for e in excludes]
        self._set("log_config", bool(log_config), False)
        self._set("upload_checkpoints", bool(upload_checkpoints or save_checkpoints), False)
        unknown = sorted(set(kwargs) - set(_INIT_KEYS))
        if unknown:
            raise ValueError(f"WandbLoggerCallback({unknown[0]}=...): libtune passes on {', '.join(_INIT_KEYS)} to "
                             f"wandb.init")
        for k, v in kwargs.items():
            self.options[k] = list(v) if k == "tags" else v


def setup_wandb(config=None, api_key=None, api_key_file=None, rank_zero_only=True, **kwargs):
    """Inside a trial: starts its W&B run (id: the trial's id, name: its name, project and
    group: the experiment's name, unless given in ``kwargs``, which go to wandb.init)
    with ``config`` as the run's config, and returns the run, as Ray's does."""
    try:
        import wandb
    except ImportError as e:
        raise ImportError(f"setup_wandb needs wandb in the trial's Python ({e}): pip install wandb") from None
    trial_id, trial_name, experiment = trial_context()
    if api_key_file:
        with open(os.path.expanduser(api_key_file)) as f:
            os.environ["WANDB_API_KEY"] = f.read().strip()
    if api_key:
        os.environ["WANDB_API_KEY"] = api_key
    run_id = re.sub(r"[^A-Za-z0-9_-]", "-", trial_id)[:64]  # unique in the cluster: <trial>@<run key>
    args = {"project": experiment, "group": experiment, "name": trial_name, "id": run_id,
            "config": config, "resume": "allow", "reinit": "create_new"}
    args.update(kwargs)
    return wandb.init(**args)
