"""Ray's ray.tune.search.basic_variant: BasicVariantGenerator (libtune.tune.search.searcher)."""

from .searcher import BasicVariantGenerator

__all__ = ["BasicVariantGenerator"]
