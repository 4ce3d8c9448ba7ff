"""Ray Tune's stoppers (``ray.tune.stopper``): when a trial, or the whole experiment,
stops. ``RunConfig(stop=...)`` takes a dict (Ray's ``>=`` on any reported metric), a
function ``(trial_id, result) -> bool``, or a ``Stopper``.

libtune's engine decides Ray's built-in stoppers itself (``MaximumIterationStopper``,
``TrialPlateauStopper``, ``ExperimentPlateauStopper``, ``TimeoutStopper``, and a
``CombinedStopper`` of them): no Python runs for them. A ``Stopper`` subclass of your
own, or a function, runs in the driver (docs/hooks.md): it sees every result, and its
``True`` stops the trial a moment later (the trial goes on while the driver decides)."""

import datetime
import numbers
from typing import Any, Callable, Dict, List, Optional

__all__ = ["Stopper", "CombinedStopper", "FunctionStopper", "NoopStopper", "MaximumIterationStopper",
           "TrialPlateauStopper", "ExperimentPlateauStopper", "TimeoutStopper"]


class Stopper:
    """Subclass and write ``__call__(trial_id, result) -> bool`` (True: that trial stops)
    and ``stop_all() -> bool`` (True: every trial stops, nothing more starts)."""

    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.__call__(trial_id, result): say whether the trial stops")

    def stop_all(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.stop_all(): say whether the experiment stops")

    # libtune's own stoppers say how its engine writes them (None: user code).
    def _native(self) -> Optional[List[dict]]:
        return None


class CombinedStopper(Stopper):
    """Several stoppers, OR'ed: any says stop, it stops."""

    def __init__(self, *stoppers: Stopper):
        for s in stoppers:
            if not isinstance(s, Stopper) and not callable(s):
                raise TypeError(f"CombinedStopper: give Stoppers (or functions of trial_id and result), not "
                                f"{type(s).__name__}")
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        return any(s(trial_id, result) for s in self._stoppers)

    def stop_all(self) -> bool:
        return any(s.stop_all() for s in self._stoppers if isinstance(s, Stopper))

    def _parts(self) -> List[Any]:
        out = []
        for s in self._stoppers:
            out.extend(s._parts() if isinstance(s, CombinedStopper) else [s])
        return out


class FunctionStopper(Stopper):
    """A function ``(trial_id, result) -> bool`` as a Stopper."""

    def __init__(self, function: Callable[[str, Dict], bool]):
        if not callable(function):
            raise TypeError(f"FunctionStopper: give a function of trial_id and result, not {function!r}")
        self._fn = function

    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        return self._fn(trial_id, result)

    def stop_all(self) -> bool:
        return False

    @classmethod
    def is_valid_function(cls, fn: Any) -> bool:
        return callable(fn) and not isinstance(fn, Stopper)


class NoopStopper(Stopper):
    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return False

    def _native(self) -> Optional[List[dict]]:
        return []


def _positive(where: str, key: str, value: Any, whole: bool = False, least: float = 0, strict: bool = True) -> Any:
    bad = isinstance(value, bool) or not isinstance(value, numbers.Real) or (whole and value != int(value)) or \
        (value <= least if strict else value < least)
    if bad:
        rule = ("above " if strict else "at least ") + str(least)
        raise ValueError(f"{where}: {key} must be a {'whole ' if whole else ''}number {rule}, not {value!r}")
    return int(value) if whole else float(value)


class MaximumIterationStopper(Stopper):
    """A trial stops at its ``max_iter``-th result."""

    def __init__(self, max_iter: int):
        self._max_iter = _positive("MaximumIterationStopper", "max_iter", max_iter, whole=True, least=1, strict=False)
        self._iter: Dict[str, int] = {}

    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        self._iter[trial_id] = self._iter.get(trial_id, 0) + 1
        return self._iter[trial_id] >= self._max_iter

    def stop_all(self) -> bool:
        return False

    def _native(self) -> Optional[List[dict]]:
        return [{"type": "maximum_iteration", "max_iter": self._max_iter}]


class TrialPlateauStopper(Stopper):
    """A trial stops once the standard deviation of its last ``num_results`` values of
    ``metric`` is below ``std`` (after ``grace_period`` results; with
    ``metric_threshold``, only beyond it by ``mode``)."""

    def __init__(self, metric: str, std: float = 0.01, num_results: int = 4, grace_period: int = 4,
                 metric_threshold: Optional[float] = None, mode: Optional[str] = None):
        w = "TrialPlateauStopper"
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"{w}: metric must be a reported metric's name, not {metric!r}")
        if metric_threshold is not None and mode not in ("min", "max"):
            raise ValueError(f"{w}: with a metric_threshold, mode must be 'min' or 'max', not {mode!r}")
        self._spec = {"type": "trial_plateau", "metric": metric, "std": _positive(w, "std", std),
                      "num_results": _positive(w, "num_results", num_results, whole=True, least=1, strict=False),
                      "grace_period": _positive(w, "grace_period", grace_period, whole=True, least=0, strict=False)}
        if metric_threshold is not None:
            self._spec["metric_threshold"] = float(metric_threshold)
            self._spec["mode"] = mode

    def _native(self) -> Optional[List[dict]]:
        return [dict(self._spec)]


class ExperimentPlateauStopper(Stopper):
    """Every trial stops once the ``top`` best values of ``metric`` over all results vary
    by at most ``std`` (standard deviation), ``patience`` results in a row."""

    def __init__(self, metric: str, std: float = 0.001, top: int = 10, mode: str = "min", patience: int = 0):
        w = "ExperimentPlateauStopper"
        if mode not in ("min", "max"):
            raise ValueError(f"{w}: mode must be 'min' or 'max', not {mode!r}")
        if not isinstance(top, int) or isinstance(top, bool) or top <= 1:
            raise ValueError(f"{w}: top must be a whole number above 1, not {top!r}")
        self._spec = {"type": "experiment_plateau", "metric": metric, "std": _positive(w, "std", std), "top": top,
                      "mode": mode, "patience": _positive(w, "patience", patience, whole=True, least=0, strict=False)}

    def _native(self) -> Optional[List[dict]]:
        return [dict(self._spec)]


class TimeoutStopper(Stopper):
    """Every trial stops ``timeout`` after the experiment started (seconds, or a
    timedelta)."""

    def __init__(self, timeout: Any):
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        self._timeout = _positive("TimeoutStopper", "timeout", timeout)

    def _native(self) -> Optional[List[dict]]:
        return [{"type": "timeout", "timeout_s": self._timeout}]


def native_parts(stop: Any) -> "tuple[List[dict], List[Any]]":
    """``stop`` (a Stopper or function) as (libtune's own stoppers for the experiment
    file, the user's stoppers the driver runs)."""
    parts = stop._parts() if isinstance(stop, CombinedStopper) else [stop]
    native, user = [], []
    for p in parts:
        spec = p._native() if _is_built_in(p) else None
        if spec is None:
            user.append(p)
        else:
            native.extend(spec)
    return native, user


_BUILT_IN = (NoopStopper, MaximumIterationStopper, TrialPlateauStopper, ExperimentPlateauStopper, TimeoutStopper)


def _is_built_in(s: Any) -> bool:
    """One of libtune's stoppers, or a subclass that changes none of its decisions."""
    base = next((b for b in type(s).__mro__ if b in _BUILT_IN), None)
    return base is not None and type(s).__call__ is base.__call__ and type(s).stop_all is base.stop_all
