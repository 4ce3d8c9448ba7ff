"""Ray Tune's ``ray.tune.experiment``: ``Trial``, what hooks in the driver see of a trial."""

from .trial import Trial

__all__ = ["Trial"]
