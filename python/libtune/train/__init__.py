"""libtune.train: the ``ray.train`` spellings of Ray Tune scripts (``train.report``,
``train.get_checkpoint``, ``train.get_context``, ``train.Checkpoint``,
``train.RunConfig``, ``train.CheckpointConfig``, ``train.FailureConfig``): the same
objects as libtune.tune's."""

from ..tune._session import Checkpoint, get_checkpoint, get_context, report
from ..tune.config import CheckpointConfig, FailureConfig, RunConfig

__all__ = ["report", "get_checkpoint", "get_context", "Checkpoint", "RunConfig", "CheckpointConfig", "FailureConfig"]
