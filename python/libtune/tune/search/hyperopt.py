"""Ray's ray.tune.search.hyperopt: HyperOptSearch (libtune.tune.search.searcher)."""

from .searcher import HyperOptSearch

__all__ = ["HyperOptSearch"]
