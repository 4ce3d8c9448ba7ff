"""Ray's ray.tune.search.optuna: OptunaSearch (libtune.tune.search.searcher)."""

from .searcher import OptunaSearch

__all__ = ["OptunaSearch"]
