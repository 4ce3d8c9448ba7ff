"""Ray's ray.tune.search.nevergrad: NevergradSearch (libtune.tune.search.searcher)."""

from .searcher import NevergradSearch

__all__ = ["NevergradSearch"]
