"""Ray's ray.tune.search.ax: AxSearch (libtune.tune.search.searcher)."""

from .searcher import AxSearch

__all__ = ["AxSearch"]
