"""Hyperopt, Nevergrad and bayes_opt themselves, run in the driver (docs/hooks.md) for
HyperOptSearch(space=...), NevergradSearch and BayesOptSearch(space=... or
utility_kwargs=...): each library is asked for a trial's configuration and told its
outcome, as Ray's searchers of those names do. The space is the library's own, or
param_space's domains turned into the library's; a constant stays as it is."""

import math
import numbers

from ._optuna import _flatten, _number, _unflatten
from .sample import Categorical, Domain, Float, Function, Integer

__all__ = ["HyperoptLibrary", "NevergradLibrary", "BayesOptLibrary"]


def _need(module, who, pip):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{who}: {pip} runs in this program then, and it is not installed: pip install {pip} "
                          f"(or leave the library's own space and options out: libtune's own search needs "
                          f"nothing)") from None


def _domains(who, config):
    """param_space flattened ('a/b' keys): {name: Domain} and {name: constant}."""
    flat = {}
    _flatten(config or {}, "", flat)
    domains, constants = {}, {}
    for name, value in flat.items():
        if isinstance(value, dict) and "grid_search" in value:
            raise ValueError(f"{who}: {name} is a grid_search, which this library cannot search: use tune.choice")
        if isinstance(value, Function):
            raise ValueError(f"{who}: {name} is a sample_from, which this library cannot model: give a domain "
                             f"(tune.uniform, tune.choice, ...)")
        (domains if isinstance(value, Domain) else constants)[name] = value
    return domains, constants


class _Library:
    """What the three share: metric and mode (the library minimises a loss), the
    trials in flight, and the objective read from a trial's last result."""

    who = ""

    def __init__(self, metric, mode, points_to_evaluate):
        self._metric, self._mode = metric, mode
        self._points = [dict(p) for p in (points_to_evaluate or [])]
        self._constants = {}
        self._live = {}

    def set_search_properties(self, metric, mode, config):
        if self._metric is None:
            self._metric = metric
        if self._mode is None:
            self._mode = mode
        self._from_param_space(config)
        return True

    def _own_space_and(self, config):
        """With a space of the library's own: param_space may add constants, not domains
        (as Ray's searchers refuse them)."""
        domains, self._constants = _domains(self.who, config)
        if domains:
            raise ValueError(f"{self.who}: param_space has domains ({', '.join(sorted(domains))}) but {self.who} "
                             f"was given a space of its own: put every parameter in one of the two")

    def _check(self):
        if self._metric is None or self._mode not in ("min", "max"):
            raise ValueError(f"{self.who}: give metric and mode ('min' or 'max') to {self.who} or TuneConfig")

    def _loss(self, result, error):
        """The value to minimise, or None when the trial gave none."""
        if error or not result:
            return None
        value = result.get(self._metric)
        if not _number(value):
            return None
        return -float(value) if self._mode == "max" else float(value)

    def on_trial_result(self, trial_id, result):
        """Each library is told a trial's outcome at its end (on_trial_complete) only."""

    def _config(self, flat):
        out = dict(self._constants)
        out.update(flat)
        return _unflatten(out)


# -- Hyperopt -------------------------------------------------------------------------


class HyperoptLibrary(_Library):
    """Hyperopt's TPE (or the ``algo`` given, e.g. hyperopt.rand.suggest) over an ``hp``
    space, stepped one trial at a time through a ``hyperopt.Trials`` store."""

    who = "HyperOptSearch"

    def __init__(self, space, metric, mode, points_to_evaluate, n_initial_points, seed, gamma):
        super().__init__(metric, mode, points_to_evaluate)
        self._hp = _need("hyperopt", self.who + "(space=...)", "hyperopt")
        self._space = space
        self._n_initial, self._gamma = n_initial_points, gamma
        self._seed = seed
        self._started = False

    def _from_param_space(self, config):
        if self._space is not None:
            return self._own_space_and(config)
        domains, self._constants = _domains(self.who, config)
        self._space = {name: self._hp_of(name, d) for name, d in domains.items()}

    def _hp_of(self, name, d):
        hp = self._hp.hp
        k, a = d.kind, d.args
        if isinstance(d, Categorical):
            return hp.choice(name, list(d.categories))
        if isinstance(d, Float):
            if k == "uniform":
                return hp.uniform(name, a[0], a[1])
            if k == "quniform":
                return hp.quniform(name, a[0], a[1], a[2])
            if k == "loguniform":
                return hp.loguniform(name, math.log(a[0]), math.log(a[1]))
            if k == "qloguniform":
                return hp.qloguniform(name, math.log(a[0]), math.log(a[1]), a[2])
            if k == "randn":
                return hp.normal(name, a[0], a[1])
            if k == "qrandn":
                return hp.qnormal(name, a[0], a[1], a[2])
        if isinstance(d, Integer):
            if k == "randint":
                return hp.randint(name, a[0], a[1])
            if k == "qrandint":
                return self._hp.pyll.scope.int(hp.quniform(name, a[0], a[1], a[2]))
        raise ValueError(f"{self.who}: {name} is {d!r}, which Hyperopt has no distribution for (uniform, quniform, "
                         f"loguniform, qloguniform, randn, qrandn, randint, qrandint and choice it has)")

    def _start(self):
        if self._started:
            return
        self._check()
        if not self._space:
            raise ValueError(f"{self.who}: the space is empty: give space=... of hyperopt's hp, or domains in "
                             f"param_space")
        import numpy as np
        from functools import partial
        hpo = self._hp
        self._domain = hpo.Domain(lambda spec: spec, self._space)
        self._algo = partial(hpo.tpe.suggest, n_startup_jobs=self._n_initial, gamma=self._gamma)
        self._rstate = np.random.default_rng(self._seed)
        self._started = True
        self._queued = []
        if self._points:
            # Hyperopt's own documents of the points (a choice kept as its index), the
            # first suggestions.
            from hyperopt.fmin import generate_trials_to_calculate
            self._trials = generate_trials_to_calculate([self._indices(p) for p in self._points])
            self._queued = list(self._trials._dynamic_trials)
            self._trials.new_trial_ids(len(self._queued))  # their ids taken: the next trial's is a new one
            for doc in self._queued:  # every label of the space, empty where the point takes another branch
                for label in self._domain.params:
                    doc["misc"]["idxs"].setdefault(label, [])
                    doc["misc"]["vals"].setdefault(label, [])
        else:
            self._trials = hpo.Trials()

    def _indices(self, point):
        """A point in Hyperopt's own terms, as Ray's HyperOptSearch takes them: the
        labels of the hp expressions, a choice as its index; a top-level choice of plain
        values may also be given by its value."""
        out = dict(point)
        for name, value in point.items():
            node = self._space.get(name) if isinstance(self._space, dict) else None
            options = _choice_options(node)
            if options is not None and not isinstance(value, int) and value in options:
                out[name] = options.index(value)
        return out

    def suggest(self, trial_id):
        self._start()
        hpo = self._hp
        if self._queued:
            doc = self._queued.pop(0)
        else:
            ids = self._trials.new_trial_ids(1)
            self._trials.refresh()
            docs = self._algo(ids, self._domain, self._trials, self._rstate.integers(2 ** 31 - 1))
            if not docs:
                return None
            self._trials.insert_trial_docs(docs)
            self._trials.refresh()
            doc = self._trials._dynamic_trials[-1]
        spec = hpo.base.spec_from_misc(doc["misc"])
        ctrl = hpo.base.Ctrl(self._trials, current_trial=doc)
        memo = self._domain.memo_from_config(spec)
        hpo.utils.use_obj_for_literal_in_memo(self._domain.expr, ctrl, hpo.base.Ctrl, memo)
        value = hpo.pyll.rec_eval(self._domain.expr, memo=memo)
        self._live[trial_id] = doc["tid"]
        flat = {}
        _flatten(value if isinstance(value, dict) else {"value": value}, "", flat)
        return self._config(flat)

    def on_trial_complete(self, trial_id, result, error):
        tid = self._live.pop(trial_id, None)
        if tid is None:
            return
        hpo = self._hp
        doc = next((d for d in self._trials._dynamic_trials if d["tid"] == tid), None)
        if doc is None:
            return
        loss = self._loss(result, error)
        if loss is None:
            doc["state"] = hpo.base.JOB_STATE_ERROR
            doc["result"] = {"status": hpo.STATUS_FAIL}
        else:
            doc["state"] = hpo.base.JOB_STATE_DONE
            doc["result"] = {"loss": loss, "status": hpo.STATUS_OK}
        self._trials.refresh()


def _choice_options(node):
    """The options of an hp.choice node (None for anything else)."""
    try:
        if node is not None and node.name == "switch":
            return [o.obj if hasattr(o, "obj") else o for o in node.pos_args[1:]]
    except AttributeError:
        pass
    return None


# -- Nevergrad ------------------------------------------------------------------------


class NevergradLibrary(_Library):
    """A Nevergrad optimizer (a class from ng.optimizers, or one made already) asked and
    told one candidate per trial."""

    who = "NevergradSearch"

    def __init__(self, optimizer, optimizer_kwargs, space, metric, mode, points_to_evaluate):
        super().__init__(metric, mode, points_to_evaluate)
        self._ng = _need("nevergrad", self.who, "nevergrad")
        if optimizer is None:
            raise ValueError(f"{self.who}: give optimizer=, e.g. nevergrad.optimizers.OnePlusOne")
        self._optimizer_arg = optimizer
        self._kwargs = dict(optimizer_kwargs or {})
        self._space = space
        self._opt = None

    def _from_param_space(self, config):
        if self._space is not None or isinstance(self._optimizer_arg, self._ng.optimizers.base.Optimizer):
            return self._own_space_and(config)
        domains, self._constants = _domains(self.who, config)
        if not domains:
            raise ValueError(f"{self.who}: param_space has no domain to search (tune.uniform, tune.choice, ...)")
        self._space = self._ng.p.Dict(**{name: self._parameter(name, d) for name, d in domains.items()})

    def _parameter(self, name, d):
        p = self._ng.p
        k, a = d.kind, d.args
        if isinstance(d, Categorical):
            return p.Choice(list(d.categories))
        if isinstance(d, Float) and k == "uniform":
            return p.Scalar(lower=a[0], upper=a[1])
        if isinstance(d, Float) and k == "loguniform":
            return p.Log(lower=a[0], upper=a[1])
        if isinstance(d, Integer) and k == "randint":
            return p.Scalar(lower=a[0], upper=a[1] - 1).set_integer_casting()
        if isinstance(d, Integer) and k == "lograndint":
            return p.Log(lower=a[0], upper=a[1] - 1).set_integer_casting()
        raise ValueError(f"{self.who}: {name} is {d!r}, which libtune cannot give Nevergrad (uniform, loguniform, "
                         f"randint, lograndint and choice it can); give space= of nevergrad's parameters instead")

    def _start(self):
        if self._opt is not None:
            return
        self._check()
        ng = self._ng
        if isinstance(self._optimizer_arg, ng.optimizers.base.Optimizer):
            self._opt = self._optimizer_arg
        else:
            space = self._space
            if isinstance(space, dict):
                space = ng.p.Dict(**space)
            if space is None:
                raise ValueError(f"{self.who}: no space: give space=... or domains in param_space")
            factory = self._optimizer_arg
            if isinstance(factory, type) or callable(factory):
                self._opt = factory(parametrization=space, **self._kwargs)
            else:
                raise TypeError(f"{self.who}: optimizer must be a Nevergrad optimizer class or instance, not "
                                f"{type(factory).__name__}")
        for point in self._points:
            flat = {}
            _flatten(point, "", flat)
            self._opt.suggest(**flat) if isinstance(self._opt.parametrization, ng.p.Instrumentation) \
                else self._opt.suggest(flat)

    def suggest(self, trial_id):
        self._start()
        candidate = self._opt.ask()
        self._live[trial_id] = candidate
        value = candidate.kwargs if isinstance(self._opt.parametrization, self._ng.p.Instrumentation) \
            else candidate.value
        if not isinstance(value, dict):
            raise TypeError(f"{self.who}: the optimizer's parametrization gives {type(value).__name__}, not a dict "
                            f"of parameters: give ng.p.Dict(...) or ng.p.Instrumentation(name=...)")
        flat = {}
        _flatten({k: _plain(v) for k, v in value.items()}, "", flat)
        return self._config(flat)

    def on_trial_complete(self, trial_id, result, error):
        candidate = self._live.pop(trial_id, None)
        if candidate is None:
            return
        loss = self._loss(result, error)
        if loss is not None:
            self._opt.tell(candidate, loss)


def _plain(v):
    """numpy's scalars as Python's (the configuration is JSON)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        try:
            return v.item()
        except (TypeError, ValueError):
            return v
    return v


# -- bayes_opt --------------------------------------------------------------------------


class BayesOptLibrary(_Library):
    """bayes_opt's BayesianOptimization (a Gaussian process over box bounds), asked with
    ``suggest`` and told with ``register``: its UtilityFunction (1.x) or acquisition
    (2.x) from ``utility_kwargs`` (kind ucb / ei / poi, kappa, xi)."""

    who = "BayesOptSearch"

    def __init__(self, space, metric, mode, points_to_evaluate, utility_kwargs, random_state, random_search_steps):
        super().__init__(metric, mode, points_to_evaluate)
        self._byo = _need("bayes_opt", self.who + "(space=... or utility_kwargs=...)", "bayesian-optimization")
        self._bounds = None
        if space is not None:
            self._bounds = self._check_bounds(space)
        self._utility_kwargs = dict(utility_kwargs or {"kind": "ucb", "kappa": 2.576, "xi": 0.0})
        self._seed = random_state
        self._random_steps = random_search_steps
        self._opt = None
        self._told = 0

    def _check_bounds(self, space):
        if not isinstance(space, dict):
            raise TypeError(f"{self.who}(space=...): give {{name: (lower, upper)}}, not {type(space).__name__}")
        out = {}
        for name, b in space.items():
            if isinstance(b, Float) and b.kind == "uniform":
                b = tuple(b.args)
            if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(
                    isinstance(x, numbers.Real) and not isinstance(x, bool) for x in b) and b[0] < b[1]):
                raise ValueError(f"{self.who}(space=...): {name} must be (lower, upper) with lower < upper, not {b!r}")
            out[name] = (float(b[0]), float(b[1]))
        return out

    def _from_param_space(self, config):
        if self._bounds is not None:
            return self._own_space_and(config)
        domains, self._constants = _domains(self.who, config)
        bounds = {}
        for name, d in domains.items():
            if not (isinstance(d, Float) and d.kind == "uniform"):
                raise ValueError(f"{self.who}: {name} is {d!r}; bayes_opt searches only continuous ranges "
                                 f"(tune.uniform); use GPSearch (libtune's own GP) for log scales, integers and "
                                 f"choices")
            bounds[name] = (float(d.args[0]), float(d.args[1]))
        if not bounds:
            raise ValueError(f"{self.who}: param_space has no tune.uniform to search")
        self._bounds = bounds

    def _start(self):
        if self._opt is not None:
            return
        self._check()
        byo = self._byo
        if hasattr(byo, "UtilityFunction"):  # bayes_opt 1.x
            self._opt = byo.BayesianOptimization(f=None, pbounds=self._bounds, random_state=self._seed, verbose=0,
                                                 allow_duplicate_points=True)
            self._utility = byo.UtilityFunction(**self._utility_kwargs)
        else:  # 2.x: acquisition functions
            acq = byo.acquisition
            k = dict(self._utility_kwargs)
            kind = k.pop("kind", "ucb")
            if kind == "ucb":
                a = acq.UpperConfidenceBound(kappa=k.get("kappa", 2.576))
            elif kind == "ei":
                a = acq.ExpectedImprovement(xi=k.get("xi", 0.0))
            elif kind == "poi":
                a = acq.ProbabilityOfImprovement(xi=k.get("xi", 0.0))
            else:
                raise ValueError(f"{self.who}: utility_kwargs kind {kind!r}: give 'ucb', 'ei' or 'poi'")
            self._opt = byo.BayesianOptimization(f=None, pbounds=self._bounds, acquisition_function=a,
                                                 random_state=self._seed, verbose=0, allow_duplicate_points=True)
            self._utility = None
        import numpy as np
        self._rng = np.random.default_rng(self._seed)

    def suggest(self, trial_id):
        self._start()
        if self._points:
            flat = {}
            _flatten(self._points.pop(0), "", flat)
            params = {k: float(flat[k]) for k in self._bounds if k in flat}
        elif self._told < self._random_steps:
            params = {k: float(self._rng.uniform(lo, hi)) for k, (lo, hi) in self._bounds.items()}
        else:
            params = self._opt.suggest(self._utility) if self._utility is not None else self._opt.suggest()
            params = {k: float(v) for k, v in params.items()}
        self._live[trial_id] = params
        return self._config(params)

    def on_trial_complete(self, trial_id, result, error):
        params = self._live.pop(trial_id, None)
        loss = self._loss(result, error)
        if params is None or loss is None:
            return
        self._opt.register(params=params, target=-loss)  # bayes_opt maximises
        self._told += 1


# -- Ax -------------------------------------------------------------------------------


class AxLibrary(_Library):
    """Ax's AxClient (Meta's adaptive experimentation: Sobol, then BoTorch's Gaussian
    processes), asked with ``get_next_trial`` and told with ``complete_trial``, as Ray's
    AxSearch: param_space's domains become Ax's parameters (or ``space`` is Ax's own list
    of parameter dicts, or ``ax_client`` an AxClient whose experiment you made), with
    ``parameter_constraints`` and ``outcome_constraints`` as Ax writes them."""

    who = "AxSearch"

    def __init__(self, space, metric, mode, points_to_evaluate, parameter_constraints, outcome_constraints,
                 ax_client, ax_kwargs):
        super().__init__(metric, mode, points_to_evaluate)
        _need("ax", self.who, "ax-platform")
        if space is not None and not isinstance(space, (list, tuple)):
            raise TypeError(f"{self.who}(space=...): give Ax's parameters, a list of dicts like {{'name': 'x', "
                            f"'type': 'range', 'bounds': [0.0, 1.0]}}, not {type(space).__name__}")
        self._space = list(space) if space is not None else None
        self._parameter_constraints = list(parameter_constraints or [])
        self._outcome_constraints = list(outcome_constraints or [])
        self._ax = ax_client
        self._ax_kwargs = dict(ax_kwargs or {})
        self._own_experiment = ax_client is not None and _has_experiment(ax_client)
        if self._own_experiment and (space is not None or parameter_constraints or outcome_constraints
                                     or metric is not None or mode is not None):
            raise ValueError(f"{self.who}: the AxClient given already has an experiment: give AxSearch no space, "
                             f"constraints, metric or mode then (they are the experiment's)")
        self._ready = False

    def _from_param_space(self, config):
        if self._space is not None or self._own_experiment:
            return self._own_space_and(config)
        domains, self._constants = _domains(self.who, config)
        if not domains:
            raise ValueError(f"{self.who}: param_space has no domain to search (tune.uniform, tune.choice, ...)")
        self._space = [self._parameter(name, d) for name, d in domains.items()]

    def _parameter(self, name, d):
        k, a = d.kind, d.args
        if isinstance(d, Categorical):
            return {"name": name, "type": "choice", "values": list(d.categories)}
        if isinstance(d, Float) and k in ("uniform", "loguniform"):
            return {"name": name, "type": "range", "bounds": [float(a[0]), float(a[1])], "value_type": "float",
                    "log_scale": k == "loguniform"}
        if isinstance(d, Integer) and k in ("randint", "lograndint"):  # upper bound exclusive in Tune, inclusive in Ax
            return {"name": name, "type": "range", "bounds": [int(a[0]), int(a[1]) - 1], "value_type": "int",
                    "log_scale": k == "lograndint"}
        raise ValueError(f"{self.who}: {name} is {d!r}, which Ax has no parameter for (uniform, loguniform, randint, "
                         f"lograndint and choice it has; Ax does not quantize)")

    def _start(self):
        if self._ready:
            return
        if self._ax is None:
            from ax.service.ax_client import AxClient
            kwargs = dict(self._ax_kwargs)
            kwargs.setdefault("verbose_logging", False)
            self._ax = AxClient(**kwargs)
        if not _has_experiment(self._ax):
            self._check()
            if not self._space:
                raise ValueError(f"{self.who}: no space: give param_space domains, space=[...] of Ax's parameters, "
                                 f"or an ax_client whose experiment you made")
            from ax.service.ax_client import ObjectiveProperties
            self._ax.create_experiment(parameters=self._space,
                                       objectives={self._metric: ObjectiveProperties(minimize=self._mode == "min")},
                                       parameter_constraints=self._parameter_constraints or None,
                                       outcome_constraints=self._outcome_constraints or None)
        opt = self._ax.experiment.optimization_config
        objective = opt.objective
        names = _metric_names(objective)
        if len(names) != 1 or getattr(objective, "is_multi_objective", False):
            raise ValueError(f"{self.who}: the experiment's objective has metrics {names}; libtune's AxSearch tells "
                             f"Ax one (use OptunaSearch with a list of metrics for several)")
        self._metric = names[0]
        self._mode = "min" if objective.minimize else "max"
        self._told = [self._metric] + [n for c in opt.outcome_constraints for n in _metric_names(c)]
        self._ready = True

    def suggest(self, trial_id):
        self._start()
        if self._points:
            flat = {}
            _flatten(self._points.pop(0), "", flat)
            parameters, index = self._ax.attach_trial(parameters=flat)
        else:
            try:
                parameters, index = self._ax.get_next_trial()
            except Exception as e:  # Ax waits: too many trials in flight, or data it needs first
                if type(e).__name__ in ("MaxParallelismReachedException", "DataRequiredError"):
                    return None
                raise
        self._live[trial_id] = index
        return self._config({k: _plain(v) for k, v in parameters.items()})

    def on_trial_complete(self, trial_id, result, error):
        index = self._live.pop(trial_id, None)
        if index is None:
            return
        data = {}
        for name in (self._told if result and not error else []):
            value = result.get(name)
            if not _number(value) or not math.isfinite(float(value)):
                data = None
                break
            data[name] = (float(value), None)
        if data:
            self._ax.complete_trial(trial_index=index, raw_data=data)
        else:  # failed, or without a value Ax needs: Ax no longer waits for it
            self._ax.log_trial_failure(trial_index=index)

    def __getstate__(self):
        """Kept (Tuner.restore) as Ax's own JSON snapshot of the client."""
        state = dict(self.__dict__)
        if state.get("_ax") is not None:
            state["_ax"] = self._ax.to_json_snapshot()
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        _need("ax", self.who, "ax-platform")
        if isinstance(self._ax, dict):
            from ax.service.ax_client import AxClient
            self._ax = AxClient.from_json_snapshot(self._ax)


def _metric_names(o):
    """The metrics of an Ax objective or outcome constraint (Ax 1.x: metric_names; 0.x: metric)."""
    if hasattr(o, "metric_names"):
        return list(o.metric_names)
    return [o.metric.name]


def _has_experiment(client):
    try:
        client.experiment
        return True
    except Exception:  # Ax raises (ValueError, or its own) while there is none
        return False
