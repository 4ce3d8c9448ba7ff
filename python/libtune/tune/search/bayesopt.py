"""Ray's ray.tune.search.bayesopt: BayesOptSearch (libtune.tune.search.searcher)."""

from .searcher import BayesOptSearch

__all__ = ["BayesOptSearch"]
