"""libtune.tune: Ray Tune's driver API on libtune's engine (issue 41, in progress: the
search-space functions, the schedulers (libtune.tune.schedulers) and the calls inside a
trial (report, get_checkpoint, get_context, Checkpoint) so far; Tuner, TuneConfig,
RunConfig and the results follow).
``from libtune import tune`` then ``tune.uniform(...)`` as with ``from ray import tune``."""

from . import schedulers
from ._session import Checkpoint, TuneContext, get_checkpoint, get_context, report
from .search.sample import (choice, grid_search, lograndint, loguniform, qlograndint, qloguniform, qrandint, qrandn,
                            quniform, randint, randn, sample_from, uniform)

__all__ = ["schedulers", "Checkpoint", "TuneContext", "report", "get_checkpoint", "get_context", "uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint",
           "lograndint", "qlograndint", "choice", "grid_search", "sample_from"]
