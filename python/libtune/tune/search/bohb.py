"""Ray's ray.tune.search.bohb: TuneBOHB (libtune.tune.search.searcher)."""

from .searcher import TuneBOHB

__all__ = ["TuneBOHB"]
