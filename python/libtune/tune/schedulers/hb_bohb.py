"""Ray's ray.tune.schedulers.hb_bohb: HyperBandForBOHB (libtune's hyperband)."""

from . import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
