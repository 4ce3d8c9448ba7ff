"""The argument checks and the said-once warnings that the driver API's config objects,
schedulers and search algorithms share."""

import math
import numbers
import os
import sys
import warnings

_said = set()
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def say_once(key, text):
    """Warns ``text`` once per process for ``key``, pointing at the user's line that
    led to it (the first frame outside the libtune package)."""
    if key in _said:
        return
    _said.add(key)
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        level += 1
        frame = frame.f_back
    warnings.warn(text, stacklevel=level)


def whole(where, key, value, least, unit="", allow_none=False):
    """``value`` as an int >= ``least`` (a float with a whole value too); None passes
    when allowed. Otherwise a ValueError naming ``where`` and ``key``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value != int(value) or value < least:
        raise ValueError(f"{where}: {key} must be a whole number of at least {least}{unit}, not {value!r}")
    return int(value)


class MetricMode:
    """``metric`` and ``mode`` of a searcher or scheduler (Ray's ``_metric``/``_mode``
    underneath, as Ray's own subclasses use them); TuneConfig's fill what it left out."""

    @property
    def metric(self):
        return self._metric

    @metric.setter
    def metric(self, value):
        self._metric = value

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, value):
        self._mode = value

    def _fill(self, metric, mode):
        if self._metric is None and metric is not None:
            self._metric = metric
        if self._mode is None and mode is not None:
            self._mode = mode
        return True
