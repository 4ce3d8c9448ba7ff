"""libtune.tune: Ray Tune's driver API on libtune's engine. ``from libtune import tune``
then ``tune.Tuner(...)``, ``tune.uniform(...)`` as with ``from ray import tune``
(docs/ray-tune.md). Inside a trial: report, get_checkpoint, get_context, Checkpoint."""

from . import schedulers, search
from ._engine import TuneError
from ._session import Checkpoint, TuneContext, get_checkpoint, get_context, report
from .analysis import ExperimentAnalysis, run
from .config import CheckpointConfig, FailureConfig, RunConfig, TuneConfig
from .result_grid import Result, ResultGrid, TrialError
from .search.sample import (choice, grid_search, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn,
                            quniform, randint, randn, sample_from, uniform)
from .trainable import PlacementGroupFactory, Trainable, with_parameters, with_resources
from .tuner import Tuner

__all__ = ["schedulers", "search", "Tuner", "TuneConfig", "RunConfig", "CheckpointConfig", "FailureConfig",
           "ResultGrid", "Result", "TrialError", "TuneError", "ExperimentAnalysis", "run", "Trainable",
           "with_resources", "with_parameters", "PlacementGroupFactory", "Checkpoint", "TuneContext", "report",
           "get_checkpoint", "get_context", "uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn",
           "randint", "qrandint", "lograndint", "qlograndint", "choice", "grid_search", "sample_from"]
