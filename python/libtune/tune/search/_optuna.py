"""Optuna itself, run in the driver for OptunaSearch(sampler=..., space=...) (docs/hooks.md):
a study asked for each trial's configuration and told each trial's outcome, with the
trial's results as Optuna's intermediate values. Uses Optuna's ask-and-tell interface."""

import math
import numbers

from .sample import Categorical, Domain, Float, Function, Integer

__all__ = ["OptunaStudy"]


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("OptunaSearch(sampler=... or space=...): Optuna runs in this program then, and it is not "
                          "installed: pip install optuna (or leave sampler and space out: libtune's own TPE needs "
                          "nothing)") from None
    return optuna


def _flatten(space, prefix, out):
    for key, value in space.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not (len(value) == 1 and "grid_search" in value):
            _flatten(value, name + "/", out)
        else:
            out[name] = value


def _distribution(optuna, name, value):
    d = optuna.distributions
    if isinstance(value, dict) and "grid_search" in value:
        raise ValueError(f"OptunaSearch: {name} is a grid_search, which Optuna cannot sample: use tune.choice")
    if isinstance(value, Function):
        raise ValueError(f"OptunaSearch: {name} is a sample_from, which Optuna cannot model: give a domain "
                         f"(tune.uniform, tune.choice, ...) or use a define-by-run space function")
    if isinstance(value, Categorical):
        return d.CategoricalDistribution(list(value.categories))
    if isinstance(value, Float):
        k, a = value.kind, value.args
        if k == "uniform":
            return d.FloatDistribution(a[0], a[1])
        if k == "quniform":
            return d.FloatDistribution(a[0], a[1], step=a[2])
        if k == "loguniform":
            return d.FloatDistribution(a[0], a[1], log=True)
        raise ValueError(f"OptunaSearch: {name} is {value!r}, which Optuna has no distribution for (uniform, "
                         f"quniform, loguniform, randint, qrandint, lograndint and choice it has)")
    if isinstance(value, Integer):
        k, a = value.kind, value.args
        if k == "randint":
            return d.IntDistribution(a[0], a[1] - 1)  # tune's upper bound is excluded, Optuna's included
        if k == "qrandint":
            return d.IntDistribution(a[0], a[1], step=a[2])
        if k == "lograndint":
            return d.IntDistribution(a[0], a[1] - 1, log=True)
        raise ValueError(f"OptunaSearch: {name} is {value!r}, which Optuna has no distribution for")
    return None  # a constant


def _unflatten(flat):
    out = {}
    for key, value in flat.items():
        parts = key.split("/")
        at = out
        for p in parts[:-1]:
            at = at.setdefault(p, {})
        at[parts[-1]] = value
    return out


def _number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


class OptunaStudy:
    def __init__(self, space, metric, mode, points_to_evaluate, sampler, seed, evaluated_rewards):
        optuna = _optuna()
        self._optuna = optuna
        if space is not None and not callable(space) and not isinstance(space, dict):
            raise TypeError(f"OptunaSearch(space=...): give a define-by-run function of an Optuna trial, or a dict "
                            f"of Optuna's distributions, not {type(space).__name__}")
        if isinstance(space, dict):
            bad = [k for k, v in space.items() if not isinstance(v, optuna.distributions.BaseDistribution)]
            if bad:
                raise TypeError(f"OptunaSearch(space=...): {', '.join(bad)} are not Optuna distributions; give tune's "
                                f"domains in Tuner(param_space=...) instead, or Optuna's distributions here")
        self._space = space
        self._sampler = sampler
        self._seed = seed
        self._metric, self._mode = metric, mode
        self._points = list(points_to_evaluate or [])
        if evaluated_rewards is not None and len(evaluated_rewards) != len(self._points):
            raise ValueError(f"OptunaSearch: evaluated_rewards has {len(evaluated_rewards)} values for "
                             f"{len(self._points)} points_to_evaluate: give one per point")
        self._rewards = evaluated_rewards
        self._constants = {}
        self._study = None
        self._trials = {}

    # The metric and mode may come from TuneConfig; the space from param_space.
    def set_search_properties(self, metric, mode, config):
        if self._metric is None:
            self._metric = metric
        if self._mode is None:
            self._mode = mode
        if self._space is None:
            flat = {}
            _flatten(config or {}, "", flat)
            space = {}
            for name, value in flat.items():
                dist = _distribution(self._optuna, name, value)
                if dist is None:
                    if isinstance(value, Domain):
                        raise ValueError(f"OptunaSearch: {name} is {value!r}, which Optuna cannot sample")
                    self._constants[name] = value
                else:
                    space[name] = dist
            self._space = space
        return True

    def _start(self):
        if self._study is not None:
            return
        if self._metric is None or self._mode is None:
            raise ValueError("OptunaSearch: give metric and mode (to OptunaSearch or TuneConfig)")
        metrics = list(self._metric) if isinstance(self._metric, (list, tuple)) else [self._metric]
        modes = list(self._mode) if isinstance(self._mode, (list, tuple)) else [self._mode] * len(metrics)
        if len(modes) != len(metrics) or any(m not in ("min", "max") for m in modes):
            raise ValueError(f"OptunaSearch: give one mode ('min' or 'max') per metric: metric={self._metric!r}, "
                             f"mode={self._mode!r}")
        self._metrics = metrics
        sampler = self._sampler
        if sampler is None:
            sampler = self._optuna.samplers.TPESampler(seed=self._seed)
        self._optuna.logging.set_verbosity(self._optuna.logging.WARNING)
        directions = ["maximize" if m == "max" else "minimize" for m in modes]
        self._study = self._optuna.create_study(sampler=sampler, directions=directions)
        for i, point in enumerate(self._points):
            flat = {}
            _flatten(point, "", flat)
            if self._rewards is not None:
                self.add_evaluated_point(point, self._rewards[i])
            else:
                self._study.enqueue_trial(flat)

    def suggest(self, trial_id):
        self._start()
        if callable(self._space):
            ot = self._study.ask()
            constants = self._space(ot)
            if constants is not None and not isinstance(constants, dict):
                raise TypeError(f"OptunaSearch's space function returned {type(constants).__name__}: return None or "
                                f"a dict of constants")
            flat = dict(ot.params)
            flat.update(constants or {})
        else:
            ot = self._study.ask(fixed_distributions=self._space)
            flat = dict(ot.params)
            flat.update(self._constants)
        self._trials[trial_id] = ot
        return _unflatten(flat)

    def on_trial_result(self, trial_id, result):
        ot = self._trials.get(trial_id)
        if ot is None or len(self._metrics) != 1:
            return
        value, step = result.get(self._metrics[0]), result.get("training_iteration")
        if _number(value) and isinstance(step, int):
            try:
                ot.report(float(value), step)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # a step reported twice, or a multi-objective study

    def on_trial_complete(self, trial_id, result, error):
        ot = self._trials.pop(trial_id, None)
        if ot is None:
            return
        state = self._optuna.trial.TrialState
        values = None
        if result and not error:
            values = [result.get(m) for m in self._metrics]
            if not all(_number(v) for v in values):
                values = None
        if values is None:
            self._study.tell(ot, state=state.FAIL)
        else:
            self._study.tell(ot, [float(v) for v in values] if len(values) > 1 else float(values[0]))

    def add_evaluated_point(self, parameters, value, error=False, pruned=False, intermediate_values=None):
        self._start()
        if not isinstance(self._space, dict):
            raise ValueError("OptunaSearch.add_evaluated_point: needs a space of distributions (not a define-by-run "
                             "function)")
        flat = {}
        _flatten(parameters, "", flat)
        dists = {k: v for k, v in self._space.items() if k in flat}
        state = self._optuna.trial.TrialState
        st = state.FAIL if error else (state.PRUNED if pruned else state.COMPLETE)
        values = None if st != state.COMPLETE else (list(value) if isinstance(value, (list, tuple)) else [value])
        trial = self._optuna.trial.create_trial(params={k: flat[k] for k in dists}, distributions=dists,
                                                values=values, state=st,
                                                intermediate_values=dict(enumerate(intermediate_values or [], 1)))
        self._study.add_trial(trial)
