"""A trial as the driver's hooks see it (Ray's ``ray.tune.experiment.Trial``): kept up to
date from the engine's events; read it, do not change it."""

import os
from typing import Any, Dict, Optional

__all__ = ["Trial"]


class Trial:
    """``trial_id``, ``config``, ``status`` (PENDING, RUNNING, PAUSED, TERMINATED, ERROR),
    ``last_result``, ``trainable_name``, ``path`` (its folder in the experiment),
    ``checkpoint`` (its latest stored Checkpoint, or None), ``error_msg``; ``str(trial)`` is
    its name (TuneConfig's trial_name_creator, else ``<trainable>_<id>``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    def __init__(self, trial_id: str, config: Dict[str, Any], trainable_name: str = "", experiment_path: str = ""):
        self.trial_id = trial_id
        self.config = config
        self.status = Trial.PENDING
        self.last_result: Dict[str, Any] = {}
        self.trainable_name = trainable_name
        self.experiment_path = experiment_path
        self.custom_trial_name: Optional[str] = None
        self.error_msg: Optional[str] = None
        self.num_failures = 0
        self._checkpoint_dir: Optional[str] = None
        self._checkpoint_iteration = -1
        self.started = 0.0  # when it first started (seconds since the epoch)
        self.restarted = 0.0  # when its current start began

    @property
    def path(self) -> str:
        return os.path.join(self.experiment_path, "trials", self.trial_id)

    local_path = path
    logdir = path

    @property
    def experiment_tag(self) -> str:
        return self.trial_id

    @property
    def checkpoint(self) -> Any:
        if not self._checkpoint_dir:
            return None
        from .._session import Checkpoint
        return Checkpoint(self._checkpoint_dir, iteration=self._checkpoint_iteration)

    @property
    def error_file(self) -> Optional[str]:
        path = os.path.join(self.path, "stderr")
        return path if os.path.exists(path) else None

    def is_finished(self) -> bool:
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def __str__(self) -> str:
        return self.custom_trial_name or (f"{self.trainable_name}_{self.trial_id}" if self.trainable_name else self.trial_id)

    def __repr__(self) -> str:
        return str(self)

    def __hash__(self) -> int:
        return hash(self.trial_id)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Trial) and other.trial_id == self.trial_id
