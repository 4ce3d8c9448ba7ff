"""Ray Tune's trial schedulers (``ray.tune.schedulers``) under their Ray names, on
libtune's own (docs/tuner.md). Each turns into the ``scheduler`` of libtune's experiment
(``to_json()``). libtune's schedulers count training iterations (each ``tune.report``
is one): a time-based ``time_attr`` is refused, naming what to write instead; where
Ray's default is time-based (MedianStoppingRule, PopulationBasedTraining) and the
script leaves it, the iteration-based default of libtune is taken and said once.
An argument libtune cannot honour is an error naming it, never ignored."""

import numbers

from .._checks import MetricMode, say_once, whole
from ..search.sample import space_to_json

__all__ = ["PB2", "TrialScheduler", "FIFOScheduler", "AsyncHyperBandScheduler", "ASHAScheduler", "HyperBandScheduler",
           "HyperBandForBOHB", "MedianStoppingRule", "PopulationBasedTraining"]

_ITERATION = "training_iteration"
def _check_mode(name, metric, mode):
    if metric is not None and not isinstance(metric, str):
        raise ValueError(f"{name}: metric must be a metric's name, not {metric!r}")
    if mode not in (None, "min", "max"):
        raise ValueError(f"{name}: mode must be 'min' or 'max', not {mode!r}")


def _time_attr(name, time_attr, default_is_time):
    if time_attr is None:
        return
    if time_attr != _ITERATION:
        raise ValueError(
            f"{name}: time_attr={time_attr!r} is not supported: libtune's schedulers count training iterations "
            f"(each tune.report is one). Use time_attr='training_iteration' with the periods in reports"
            + (", or leave time_attr out" if default_is_time else ""))


def _period(name, key, value, time_attr, default):
    """A period of a scheduler whose Ray default time_attr is time_total_s (seconds): in
    libtune it counts training iterations. Left out, libtune's default; given without
    time_attr, taken as iterations. Either is said once."""
    if time_attr is None:
        if value is None:
            say_once(f"{name}.{key}", f"{name}: libtune counts training iterations, not seconds: {key} is "
                                       f"{default} iteration{'' if default == 1 else 's'} (Ray's default is 60 s of "
                                       f"time_total_s); pass time_attr='training_iteration', {key}=N to choose")
        else:
            say_once(f"{name}.{key}=", f"{name}: {key}={value!r} is taken as training iterations (libtune's "
                                        f"schedulers count iterations; Ray's default time_attr counts seconds); "
                                        f"pass time_attr='training_iteration' to say so")
    return default if value is None else value


def _above_one(name, key, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 1:
        raise ValueError(f"{name}: {key} must be a number above 1, not {value!r}")
    return value


def _fraction(name, key, value, low, high):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= value <= high:
        raise ValueError(f"{name}: {key} must be a number from {low} to {high}, not {value!r}")
    return float(value)


def _unsupported(name, key, value, default, instead):
    if value != default:
        raise ValueError(f"{name}: {key}={value!r} is not supported: {instead}")


class TrialScheduler(MetricMode):
    """The base of the schedulers: ``metric`` and ``mode`` (or TuneConfig's), and the
    scheduler's entry in libtune's experiment (``to_json()``).

    A scheduler of your own (Ray's TrialScheduler API) subclasses this and writes
    ``on_trial_result(tune_controller, trial, result)`` returning CONTINUE, PAUSE or STOP,
    and as it needs ``on_trial_add``, ``on_trial_complete``, ``on_trial_error``,
    ``choose_trial_to_run`` (which PAUSED trial runs again). It runs in the driver
    (docs/hooks.md); its decisions reach the trial a moment after the result."""

    _name = "TrialScheduler"
    CONTINUE = "CONTINUE"
    PAUSE = "PAUSE"
    STOP = "STOP"
    NOOP = "NOOP"

    def __init__(self, metric=None, mode=None):
        _check_mode(self._name if type(self).to_json is not TrialScheduler.to_json else type(self).__name__,
                    metric, mode)
        self._metric, self._mode = metric, mode

    @property
    def _in_driver(self):
        """A scheduler of the user's (its decisions run in the driver), not libtune's."""
        return type(self).to_json is TrialScheduler.to_json or \
            type(self).on_trial_result is not TrialScheduler.on_trial_result

    def to_json(self):
        raise NotImplementedError

    # -- Ray's TrialScheduler API, for a scheduler of your own -----------------------

    def set_search_properties(self, metric, mode, **spec):
        return self._fill(metric, mode)

    def on_trial_add(self, tune_controller, trial):
        pass

    def on_trial_error(self, tune_controller, trial):
        pass

    def on_trial_result(self, tune_controller, trial, result):
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result):
        pass

    def on_trial_remove(self, tune_controller, trial):
        pass

    def choose_trial_to_run(self, tune_controller):
        """A PAUSED trial to run again (None: none now)."""
        for t in tune_controller.get_trials():
            if t.status == "PAUSED":
                return t
        return None

    def debug_string(self):
        return type(self).__name__

    def __repr__(self):
        if self._in_driver:
            return f"{type(self).__name__}()"
        return f"{type(self).__name__}({self.to_json()})"


class FIFOScheduler(TrialScheduler):
    """Every trial runs to its end (libtune's default)."""

    _name = "FIFOScheduler"

    def __init__(self):
        super().__init__()

    def to_json(self):
        return "fifo"


class AsyncHyperBandScheduler(TrialScheduler):
    """ASHA: libtune's ``asha`` (docs/tuner.md)."""

    _name = "AsyncHyperBandScheduler"

    def __init__(self, time_attr=_ITERATION, metric=None, mode=None, max_t=100, grace_period=1,
                 reduction_factor=4, brackets=1, stop_last_trials=True):
        super().__init__(metric, mode)
        _time_attr(self._name, time_attr, False)
        self.max_t = whole(self._name, "max_t", max_t, 1, " (training iterations)")
        self.grace_period = whole(self._name, "grace_period", grace_period, 1, " (training iterations)")
        if self.grace_period > self.max_t:
            raise ValueError(f"{self._name}: grace_period ({grace_period}) must not be above max_t ({max_t})")
        self.reduction_factor = _above_one(self._name, "reduction_factor", reduction_factor)
        self.brackets = whole(self._name, "brackets", brackets, 1)
        if not stop_last_trials:
            say_once(f"{self._name}.stop_last_trials", f"{self._name}(stop_last_trials=False): libtune stops every "
                                                        f"trial at max_t; raise max_t to let the best ones go on")

    def to_json(self):
        return {"type": "asha", "max_t": self.max_t, "grace_period": self.grace_period,
                "reduction_factor": self.reduction_factor, "brackets": self.brackets}


ASHAScheduler = AsyncHyperBandScheduler


class HyperBandScheduler(TrialScheduler):
    """Synchronous HyperBand: libtune's ``hyperband`` (docs/tuner.md)."""

    _name = "HyperBandScheduler"

    def __init__(self, time_attr=_ITERATION, metric=None, mode=None, max_t=81, reduction_factor=3,
                 stop_last_trials=True):
        super().__init__(metric, mode)
        _time_attr(self._name, time_attr, False)
        self.max_t = whole(self._name, "max_t", max_t, 1, " (training iterations)")
        self.reduction_factor = _above_one(self._name, "reduction_factor", reduction_factor)
        if not stop_last_trials:
            say_once(f"{self._name}.stop_last_trials", f"{self._name}(stop_last_trials=False): libtune stops every "
                                                        f"trial at max_t; raise max_t to let the best ones go on")

    def to_json(self):
        return {"type": "hyperband", "max_t": self.max_t, "reduction_factor": self.reduction_factor}


class HyperBandForBOHB(HyperBandScheduler):
    """Ray's HyperBand for BOHB (with TuneBOHB): libtune's ``hyperband``, which its BOHB
    search works with."""

    _name = "HyperBandForBOHB"


class MedianStoppingRule(TrialScheduler):
    """libtune's ``median_stopping`` (docs/tuner.md). Ray's default period is 60 s of
    ``time_total_s``; libtune counts iterations: left out, grace_period is 1 iteration."""

    _name = "MedianStoppingRule"

    def __init__(self, time_attr=None, metric=None, mode=None, grace_period=None, min_samples_required=3,
                 min_time_slice=0, hard_stop=True):
        super().__init__(metric, mode)
        _time_attr(self._name, time_attr, True)
        grace_period = _period(self._name, "grace_period", grace_period, time_attr, 1)
        self.grace_period = whole(self._name, "grace_period", grace_period, 0, " (training iterations)")
        self.min_samples_required = whole(self._name, "min_samples_required", min_samples_required, 1)
        _unsupported(self._name, "min_time_slice", min_time_slice, 0, "libtune decides at every result")
        _unsupported(self._name, "hard_stop", hard_stop, True,
                     "libtune stops a trial below the median (Ray's hard_stop=True); it does not pause it")

    def to_json(self):
        return {"type": "median_stopping", "grace_period": self.grace_period,
                "min_samples_required": self.min_samples_required}


class PopulationBasedTraining(TrialScheduler):
    """libtune's ``pbt`` (asynchronous, as Ray's with synch=False; docs/tuner.md). Ray's
    default period is 60 s of ``time_total_s``; libtune counts iterations: left out,
    perturbation_interval is 10 iterations."""

    _name = "PopulationBasedTraining"

    def __init__(self, time_attr=None, metric=None, mode=None, perturbation_interval=None, burn_in_period=0,
                 hyperparam_mutations=None, quantile_fraction=0.25, resample_probability=0.25,
                 perturbation_factors=(1.2, 0.8), custom_explore_fn=None, log_config=True, require_attrs=True,
                 synch=False):
        super().__init__(metric, mode)
        _time_attr(self._name, time_attr, True)
        perturbation_interval = _period(self._name, "perturbation_interval", perturbation_interval, time_attr, 10)
        if burn_in_period:
            burn_in_period = _period(self._name, "burn_in_period", burn_in_period, time_attr, 0)
        self.perturbation_interval = whole(self._name, "perturbation_interval", perturbation_interval, 1,
                                           " (training iterations)")
        self.burn_in_period = whole(self._name, "burn_in_period", burn_in_period, 0, " (training iterations)")
        if not hyperparam_mutations:
            raise ValueError(f"{self._name}: hyperparam_mutations is required: which parameters PBT may change, "
                             f"e.g. {{'lr': tune.loguniform(1e-4, 0.1), 'batch_size': [16, 32, 64]}}")
        if not isinstance(hyperparam_mutations, dict):
            raise ValueError(f"{self._name}: hyperparam_mutations must be a dict, not {hyperparam_mutations!r}")
        self._functions = {}  # the mutations the driver draws: key -> function
        self.hyperparam_mutations = _mutations(hyperparam_mutations, "hyperparam_mutations", "", self._functions)
        self.quantile_fraction = _fraction(self._name, "quantile_fraction", quantile_fraction, 0, 0.5)
        self.resample_probability = _fraction(self._name, "resample_probability", resample_probability, 0, 1)
        factors = list(perturbation_factors) if isinstance(perturbation_factors, (list, tuple)) else None
        if not factors or len(factors) != 2 or any(isinstance(f, bool) or not isinstance(f, numbers.Real)
                                                   or not f > 0 for f in factors):
            raise ValueError(f"{self._name}: perturbation_factors must be two numbers above 0, "
                             f"e.g. (1.2, 0.8), not {perturbation_factors!r}")
        self.perturbation_factors = [float(f) for f in factors]
        if custom_explore_fn is not None and not callable(custom_explore_fn):
            raise ValueError(f"{self._name}: custom_explore_fn must be a function of the config, not "
                             f"{custom_explore_fn!r}")
        self.custom_explore_fn = custom_explore_fn  # runs in the driver (docs/hooks.md)
        _unsupported(self._name, "synch", synch, False, "libtune's PBT is asynchronous (Ray's synch=False)")
        _unsupported(self._name, "log_config", log_config, True,
                     "libtune always keeps each trial's configuration (trials.json, the store)")
        _unsupported(self._name, "require_attrs", require_attrs, True,
                     "libtune requires the metric in every result that PBT compares")

    def to_json(self):
        return {"type": "pbt", "perturbation_interval": self.perturbation_interval,
                "burn_in_period": self.burn_in_period, "quantile_fraction": self.quantile_fraction,
                "resample_probability": self.resample_probability,
                "perturbation_factors": self.perturbation_factors,
                "hyperparam_mutations": self.hyperparam_mutations,
                **({"custom_explore": True} if self.custom_explore_fn is not None else {})}


def _mutations(value, where, pointer, functions):
    """PBT's hyperparam_mutations as libtune's experiment writes them; a function (Ray
    calls it for a new value) becomes ``{function: true}``, drawn by the driver, kept in
    ``functions`` by its parameter's name."""
    from ..search.sample import Domain, Function
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a dict, not {value!r}")
    out = {}
    for key, inner in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{where}: the key {key!r} is not a string")
        if isinstance(inner, Function):
            inner = inner.func
        if callable(inner) and not isinstance(inner, Domain):
            functions[key] = inner
            out[key] = {"function": True}
        else:
            out[key] = space_to_json(inner, f"{where}.{key}")
    return out


from .pb2 import PB2  # noqa: E402  (pb2 builds on PopulationBasedTraining above)
