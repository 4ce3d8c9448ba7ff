"""libtune.tune.search: Ray Tune's ``ray.tune.search`` names (the search-space domains so
far; the search algorithms come with the driver API)."""

from .sample import (Categorical, Domain, Float, Function, Integer, choice, grid_search, lograndint, loguniform,
                     qlograndint, qloguniform, qrandint, qrandn, quniform, randint, randn, sample_from, uniform)

__all__ = ["Domain", "Float", "Integer", "Categorical", "Function", "uniform", "quniform", "loguniform",
           "qloguniform", "randn", "qrandn", "randint", "qrandint", "lograndint", "qlograndint", "choice",
           "grid_search", "sample_from"]
