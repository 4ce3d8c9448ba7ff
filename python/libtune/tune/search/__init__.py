"""libtune.tune.search: Ray Tune's ``ray.tune.search`` names: the search-space domains
and the search algorithms (libtune's random, grid, TPE, GP and BOHB; Ray's
OptunaSearch, HyperOptSearch, BayesOptSearch and TuneBOHB names for them, each running
its library in the driver when given the library's own space or options;
NevergradSearch; Repeater and ConcurrencyLimiter)."""

from .sample import (Categorical, Domain, Float, Function, Integer, choice, grid_search, lograndint, loguniform,
                     qlograndint, qloguniform, qrandint, qrandn, quniform, randint, randn, sample_from, uniform)
from .searcher import (BasicVariantGenerator, BayesOptSearch, BOHBSearch, ConcurrencyLimiter, GPSearch, GridSearch,
                       HyperOptSearch, NevergradSearch, AxSearch, OptunaSearch, RandomSearch, Repeater, Searcher,
                       TPESearch, TuneBOHB)

__all__ = ["Domain", "Float", "Integer", "Categorical", "Function", "uniform", "quniform", "loguniform",
           "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint", "qlograndint", "choice",
           "grid_search", "sample_from", "Searcher", "BasicVariantGenerator", "ConcurrencyLimiter", "RandomSearch",
           "GridSearch", "TPESearch", "GPSearch", "BOHBSearch", "OptunaSearch", "HyperOptSearch", "BayesOptSearch",
           "NevergradSearch", "AxSearch", "Repeater", "TuneBOHB"]
