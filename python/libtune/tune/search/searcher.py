"""Ray Tune's search algorithms under their names, on libtune's own (docs/tuner.md):
random (``BasicVariantGenerator``), grid, TPE, GP and BOHB, each turning into the
``search`` of libtune's experiment (``to_json()``). Ray's ``OptunaSearch`` and
``HyperOptSearch`` are libtune's TPE (said once), ``BayesOptSearch`` its GP, ``TuneBOHB``
its BOHB, unless given the library's own space or options: then the library itself runs
in the driver (_optuna.py, _libraries.py), as ``NevergradSearch`` always does.
``Repeater`` repeats a driver searcher's configurations. Arguments libtune cannot honour
are errors naming them."""

import numbers
import pickle

from .._checks import MetricMode, say_once, whole
from .sample import space_to_json

__all__ = ["Searcher", "BasicVariantGenerator", "ConcurrencyLimiter", "RandomSearch", "GridSearch", "TPESearch",
           "GPSearch", "BOHBSearch", "OptunaSearch", "HyperOptSearch", "BayesOptSearch", "NevergradSearch", "AxSearch",
           "TuneBOHB", "Repeater"]

def _points(name, points):
    if points is None:
        return None
    if not isinstance(points, (list, tuple)) or not all(isinstance(p, dict) for p in points):
        raise ValueError(f"{name}: points_to_evaluate must be a list of configs (dicts), not {points!r}")
    return [space_to_json(p, f"{name}.points_to_evaluate[{i}]") for i, p in enumerate(points)]


def _no_space(name, space):
    if space is not None:
        raise ValueError(f"{name}: a search space of its own (space=...) is not supported: give the space as "
                         f"Tuner(param_space=...) with tune's domains, which every libtune search reads")


def _real(name, key, value, low=None, high=None):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or (low is not None and value <= low) \
            or (high is not None and value >= high):
        raise ValueError(f"{name}: {key}={value!r} is out of range")
    return float(value)


class Searcher(MetricMode):
    """The base of the search algorithms: ``metric``, ``mode`` (or TuneConfig's), the
    seed, and the entry in libtune's experiment (``to_json()``).

    A searcher of your own (Ray's Searcher API) subclasses this and writes
    ``suggest(trial_id)`` (a config, None for not now, or ``Searcher.FINISHED``), and as it
    needs ``on_trial_result(trial_id, result)``, ``on_trial_complete(trial_id,
    result=None, error=False)``, ``set_search_properties(metric, mode, config, **spec)``.
    It runs in the driver (docs/hooks.md); the searcher object is pickled with the
    experiment, so Tuner.restore continues it where it was."""

    _name = "Searcher"
    _type = None
    FINISHED = "FINISHED"
    CKPT_FILE_TMPL = "searcher-state-{}.pkl"

    def __init__(self, metric=None, mode=None, points_to_evaluate=None, seed=None, **options):
        name = self._name if self._type is not None else type(self).__name__
        if mode not in (None, "min", "max"):
            raise ValueError(f"{name}: mode must be 'min' or 'max', not {mode!r}")
        if metric is not None and not isinstance(metric, str):
            raise ValueError(f"{name}: metric must be a metric's name, not {metric!r}")
        self._metric, self._mode = metric, mode
        self.seed = whole(name, "seed", seed, 0, allow_none=True)
        self._options = {k: v for k, v in options.items() if v is not None}
        points = _points(name, points_to_evaluate)
        if points:
            self._options["points_to_evaluate"] = points
        self.max_concurrent = None

    @property
    def _in_driver(self):
        """Whether this searcher is code that runs in the driver (a user's subclass, or
        a library run there) rather than one of libtune's own."""
        return type(self).suggest is not Searcher.suggest

    def to_json(self):
        return {"type": self._type, **self._options} if self._options else self._type

    # -- Ray's Searcher API, for a searcher of your own -----------------------------

    def set_search_properties(self, metric, mode, config, **spec):
        """Given the experiment's metric, mode and param_space before the first suggest;
        fills metric and mode where the searcher has none."""
        return self._fill(metric, mode)

    def suggest(self, trial_id):
        raise NotImplementedError(f"{type(self).__name__}.suggest(trial_id): return a config (a dict), None (not "
                                  f"now) or Searcher.FINISHED")

    def on_trial_result(self, trial_id, result):
        pass

    def on_trial_complete(self, trial_id, result=None, error=False):
        pass

    def add_evaluated_point(self, parameters, value, error=False, pruned=False, intermediate_values=None):
        raise NotImplementedError(f"{type(self).__name__}.add_evaluated_point is not implemented")

    def get_state(self):
        return dict(self.__dict__)

    def set_state(self, state):
        self.__dict__.update(state)

    def save(self, checkpoint_path):
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path):
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))

    def __repr__(self):
        if self._in_driver:
            return f"{type(self).__name__}()"
        return f"{type(self).__name__}({self.to_json()!r})"


class RandomSearch(Searcher):
    """Random search (libtune's default): num_samples draws of the space, grid_search
    values each in turn."""
    _name, _type = "RandomSearch", "random"

    def __init__(self, points_to_evaluate=None, random_state=None, metric=None, mode=None):
        super().__init__(metric, mode, points_to_evaluate, random_state)


class BasicVariantGenerator(RandomSearch):
    """Ray's default search: random draws and grid_search (libtune's random search)."""
    _name = "BasicVariantGenerator"

    def __init__(self, points_to_evaluate=None, max_concurrent=0, constant_grid_search=False, random_state=None):
        super().__init__(points_to_evaluate, random_state)
        if constant_grid_search:
            raise ValueError("BasicVariantGenerator(constant_grid_search=True) is not supported: libtune draws the "
                             "random parameters anew for each grid point")
        self.max_concurrent = whole(self._name, "max_concurrent", max_concurrent, 0, allow_none=True) or None


class GridSearch(Searcher):
    """Every point of the grid (grid_search values, choice's categories)."""
    _name, _type = "GridSearch", "grid"

    def __init__(self, metric=None, mode=None):
        super().__init__(metric, mode)


class TPESearch(Searcher):
    """libtune's TPE (Optuna's and Hyperopt's algorithm; docs/tuner.md has its options)."""
    _name, _type = "TPESearch", "tpe"

    def __init__(self, metric=None, mode=None, points_to_evaluate=None, seed=None, n_startup_trials=None,
                 n_ei_candidates=None, gamma=None, max_below=None, prior_weight=None, multivariate=None,
                 constant_liar=None):
        n = self._name
        super().__init__(metric, mode, points_to_evaluate, seed,
                         n_startup_trials=whole(n, "n_startup_trials", n_startup_trials, 1, allow_none=True),
                         n_ei_candidates=whole(n, "n_ei_candidates", n_ei_candidates, 1, allow_none=True),
                         gamma=_real(n, "gamma", gamma, 0, 1),
                         max_below=whole(n, "max_below", max_below, 1, allow_none=True),
                         prior_weight=_real(n, "prior_weight", prior_weight, 0),
                         multivariate=multivariate, constant_liar=constant_liar)


class GPSearch(Searcher):
    """libtune's Gaussian-process search (BayesOpt's kind; docs/tuner.md)."""
    _name, _type = "GPSearch", "gp"

    def __init__(self, metric=None, mode=None, points_to_evaluate=None, seed=None, n_startup_trials=None,
                 n_candidates=None, n_local=None, fantasize_pending=None, max_fit_trials=None):
        n = self._name
        super().__init__(metric, mode, points_to_evaluate, seed,
                         n_startup_trials=whole(n, "n_startup_trials", n_startup_trials, 1, allow_none=True),
                         n_candidates=whole(n, "n_candidates", n_candidates, 1, allow_none=True),
                         n_local=whole(n, "n_local", n_local, 0, allow_none=True), fantasize_pending=fantasize_pending,
                         max_fit_trials=whole(n, "max_fit_trials", max_fit_trials, 4, allow_none=True))


class BOHBSearch(Searcher):
    """libtune's BOHB (with HyperBandScheduler, as Ray's TuneBOHB with HyperBandForBOHB)."""
    _name, _type = "BOHBSearch", "bohb"

    def __init__(self, metric=None, mode=None, points_to_evaluate=None, seed=None, random_fraction=None,
                 min_points_in_model=None, gamma=None, n_ei_candidates=None):
        n = self._name
        super().__init__(metric, mode, points_to_evaluate, seed,
                         random_fraction=_real(n, "random_fraction", random_fraction, -1e-12, 1 + 1e-12),
                         min_points_in_model=whole(n, "min_points_in_model", min_points_in_model, 0, allow_none=True),
                         gamma=_real(n, "gamma", gamma, 0, 1),
                         n_ei_candidates=whole(n, "n_ei_candidates", n_ei_candidates, 1, allow_none=True))


class _RunsLibrary:
    """A Ray searcher that may run its library in the driver (self._lib, made in
    __init__ when asked for) or else be libtune's own (self._lib None)."""

    _lib = None

    @property
    def _in_driver(self):
        return self._lib is not None

    def set_search_properties(self, metric, mode, config, **spec):
        if self._lib is None:
            return super().set_search_properties(metric, mode, config, **spec)
        return self._lib.set_search_properties(metric, mode, config)

    def suggest(self, trial_id):
        if self._lib is None:
            return super().suggest(trial_id)
        return self._lib.suggest(trial_id)

    def on_trial_result(self, trial_id, result):
        if self._lib is not None:
            self._lib.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id, result=None, error=False):
        if self._lib is not None:
            self._lib.on_trial_complete(trial_id, result, error)


class OptunaSearch(_RunsLibrary, TPESearch):
    """Ray's OptunaSearch. As Ray's examples mostly use it (no sampler, the space in
    param_space): libtune's own TPE, which matches or beats Optuna's TPESampler
    (bench/results), said once; Optuna is not needed. Given a ``sampler`` of Optuna's
    (any: CmaEsSampler, NSGAIISampler, ...), a define-by-run ``space`` function (or a dict
    of Optuna's distributions), ``evaluated_rewards``, or several metrics, Optuna itself
    runs in the driver (docs/hooks.md) and decides each configuration."""
    _name = "OptunaSearch"

    def __init__(self, space=None, metric=None, mode=None, points_to_evaluate=None, sampler=None, seed=None,
                 evaluated_rewards=None):
        several = isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple))
        if space is None and sampler is None and evaluated_rewards is None and not several:
            say_once("optuna", "OptunaSearch: libtune runs its own TPE (Optuna's algorithm), not Optuna; Optuna is "
                                "not needed (give OptunaSearch(sampler=...) to run Optuna's own)")
            super().__init__(metric, mode, points_to_evaluate, seed)
            return
        from ._optuna import OptunaStudy
        Searcher.__init__(self, None, None, None, seed)
        self._lib = OptunaStudy(space, metric, mode, points_to_evaluate, sampler, seed, evaluated_rewards)
        self._metric = metric if not several else None
        self._mode = mode if not several else None

    def add_evaluated_point(self, parameters, value, error=False, pruned=False, intermediate_values=None):
        if self._lib is None:
            return super().add_evaluated_point(parameters, value, error, pruned, intermediate_values)
        self._lib.add_evaluated_point(parameters, value, error, pruned, intermediate_values)


class HyperOptSearch(_RunsLibrary, TPESearch):
    """Ray's HyperOptSearch. Without a space of its own: libtune's TPE (Hyperopt's
    algorithm; Hyperopt is not needed), said once. Given ``space`` (hyperopt's ``hp``
    expressions, conditional ones too), Hyperopt itself runs in the driver."""
    _name = "HyperOptSearch"

    def __init__(self, space=None, metric=None, mode=None, points_to_evaluate=None, n_initial_points=20,
                 random_state_seed=None, gamma=0.25):
        if space is not None:
            from ._libraries import HyperoptLibrary
            Searcher.__init__(self, None, None, None, random_state_seed)
            whole(self._name, "n_initial_points", n_initial_points, 1)
            self._lib = HyperoptLibrary(space, metric, mode, points_to_evaluate, n_initial_points,
                                        random_state_seed, _real(self._name, "gamma", gamma, 0, 1))
            self._metric, self._mode = metric, mode
            say_once("hyperopt", "HyperOptSearch(space=...): Hyperopt runs in this program (the driver)")
            return
        say_once("hyperopt", "HyperOptSearch: libtune runs its own TPE (Hyperopt's algorithm), not Hyperopt; "
                              "Hyperopt is not needed (give space=... of hyperopt's hp to run Hyperopt itself)")
        super().__init__(metric, mode, points_to_evaluate, random_state_seed,
                         n_startup_trials=n_initial_points, gamma=gamma)


class BayesOptSearch(_RunsLibrary, GPSearch):
    """Ray's BayesOptSearch. Without a space or utility of its own: libtune's
    Gaussian-process search, said once. Given ``space`` ({name: (lower, upper)}) or
    ``utility_kwargs``, bayes_opt itself runs in the driver (``pip install
    bayesian-optimization``); with only utility_kwargs and bayes_opt missing, libtune's GP
    runs and says so."""
    _name = "BayesOptSearch"

    def __init__(self, space=None, metric=None, mode=None, points_to_evaluate=None, utility_kwargs=None,
                 random_state=42, random_search_steps=10, verbose=0, patience=5, skip_duplicate=True):
        steps = whole(self._name, "random_search_steps", random_search_steps, 0)
        library = space is not None
        if utility_kwargs is not None and not library:
            import importlib.util
            library = importlib.util.find_spec("bayes_opt") is not None
            if not library:
                say_once("bayesopt.utility", f"BayesOptSearch(utility_kwargs={utility_kwargs!r}): bayes_opt is not "
                                              f"installed, so libtune's own GP runs (expected improvement); pip "
                                              f"install bayesian-optimization to run bayes_opt with that utility")
        if library:
            from ._libraries import BayesOptLibrary
            Searcher.__init__(self, None, None, None, random_state)
            self._lib = BayesOptLibrary(space, metric, mode, points_to_evaluate, utility_kwargs, random_state, steps)
            self._metric, self._mode = metric, mode
            say_once("bayesopt", "BayesOptSearch: bayes_opt runs in this program (the driver)")
            return
        say_once("bayesopt", "BayesOptSearch: libtune runs its own Gaussian-process search, not bayes_opt (give "
                             "space=... or utility_kwargs=... with bayes_opt installed to run bayes_opt itself)")
        super().__init__(metric, mode, points_to_evaluate, random_state, n_startup_trials=max(1, steps))


class NevergradSearch(_RunsLibrary, Searcher):
    """Ray's NevergradSearch: a Nevergrad optimizer (``optimizer=ng.optimizers.OnePlusOne``
    or one made already) runs in the driver over ``space`` (nevergrad's parameters) or
    param_space's domains. ``pip install nevergrad``."""
    _name = "NevergradSearch"

    def __init__(self, optimizer=None, optimizer_kwargs=None, space=None, metric=None, mode=None,
                 points_to_evaluate=None):
        from ._libraries import NevergradLibrary
        Searcher.__init__(self, None, None)
        self._lib = NevergradLibrary(optimizer, optimizer_kwargs, space, metric, mode, points_to_evaluate)
        self._metric, self._mode = metric, mode


class AxSearch(_RunsLibrary, Searcher):
    """Ray's AxSearch: Ax itself (``pip install ax-platform``) runs in the driver, its
    AxClient over param_space's domains (or ``space``, Ax's own parameter dicts, or an
    ``ax_client`` whose experiment you made), with Ax's ``parameter_constraints``
    ("x1 + x2 <= 2.0") and ``outcome_constraints`` ("l2norm <= 1.25"); ``ax_kwargs`` go to
    AxClient."""
    _name = "AxSearch"

    def __init__(self, space=None, metric=None, mode=None, points_to_evaluate=None, parameter_constraints=None,
                 outcome_constraints=None, ax_client=None, **ax_kwargs):
        from ._libraries import AxLibrary
        if isinstance(metric, (list, tuple)) or isinstance(mode, (list, tuple)):
            raise ValueError("AxSearch: give one metric and mode (Ray's AxSearch tells Ax one objective); for "
                             "several use OptunaSearch(metric=[...], mode=[...])")
        Searcher.__init__(self, None, None)
        self._lib = AxLibrary(space, metric, mode, points_to_evaluate, parameter_constraints, outcome_constraints,
                              ax_client, ax_kwargs)
        self._metric, self._mode = metric, mode
        say_once("ax", "AxSearch: Ax runs in this program (the driver)")


class TuneBOHB(BOHBSearch):
    """Ray's TuneBOHB: libtune's BOHB (with HyperBandScheduler). Said once."""
    _name = "TuneBOHB"

    def __init__(self, space=None, bohb_config=None, metric=None, mode=None, points_to_evaluate=None, seed=None,
                 max_concurrent=0):
        _no_space(self._name, space)
        config = dict(bohb_config or {})
        known = {"random_fraction", "min_points_in_model", "gamma", "num_samples"}
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"TuneBOHB(bohb_config): {', '.join(sorted(unknown))} not supported; it may have "
                             f"random_fraction, min_points_in_model, gamma, num_samples")
        say_once("bohb", "TuneBOHB: libtune runs its own BOHB, not hpbandster")
        super().__init__(metric, mode, points_to_evaluate, seed, random_fraction=config.get("random_fraction"),
                         min_points_in_model=config.get("min_points_in_model"), gamma=config.get("gamma"),
                         n_ei_candidates=config.get("num_samples"))
        self.max_concurrent = whole(self._name, "max_concurrent", max_concurrent, 0, allow_none=True) or None


class ConcurrencyLimiter(Searcher):
    """At most ``max_concurrent`` trials at once for the wrapped search (it becomes
    TuneConfig's max_concurrent_trials, the smaller of the two)."""
    _name = "ConcurrencyLimiter"

    def __init__(self, searcher, max_concurrent, batch=False):
        if not isinstance(searcher, Searcher):
            raise TypeError(f"ConcurrencyLimiter: wrap one of libtune.tune.search's algorithms, not "
                            f"{type(searcher).__name__}")
        if batch:
            raise ValueError("ConcurrencyLimiter(batch=True) is not supported: libtune starts trials as places free")
        self.searcher = searcher
        self.metric, self.mode, self.seed = searcher.metric, searcher.mode, searcher.seed
        self.max_concurrent = whole(self._name, "max_concurrent", max_concurrent, 1, allow_none=True)
        if searcher.max_concurrent:
            self.max_concurrent = min(self.max_concurrent, searcher.max_concurrent)

    @property
    def _in_driver(self):
        return self.searcher._in_driver

    def to_json(self):
        return self.searcher.to_json()


class Repeater(Searcher):
    """Ray's Repeater: each configuration the wrapped searcher suggests runs ``repeat``
    times (with ``__trial_index__`` 0..repeat-1 in the config when ``set_index``); once
    every repeat ended, the searcher is told the group's mean of the metric. It runs in
    the driver, so it wraps a searcher that runs there too (a Searcher subclass,
    OptunaSearch(sampler=...), HyperOptSearch(space=...), NevergradSearch, ...)."""
    _name = "Repeater"

    def __init__(self, searcher, repeat=1, set_index=True):
        if not isinstance(searcher, Searcher) or isinstance(searcher, ConcurrencyLimiter):
            raise TypeError(f"Repeater: wrap a searcher (not {type(searcher).__name__}); put a ConcurrencyLimiter "
                            f"around the Repeater instead")
        if not searcher._in_driver:
            raise ValueError(f"Repeater({type(searcher).__name__}): libtune's own searchers run in the engine, which "
                             f"does not repeat configurations; wrap a searcher that runs in the driver (a Searcher "
                             f"subclass, OptunaSearch(sampler=...), HyperOptSearch(space=...), NevergradSearch), or "
                             f"repeat inside the trainable")
        super().__init__(searcher.metric, searcher.mode)
        self.searcher = searcher
        self.repeat = whole(self._name, "repeat", repeat, 1)
        self.set_index = bool(set_index)
        self._groups = {}  # group number -> {"config", "left" (repeats still to start), "live", "scores"}
        self._of_trial = {}  # trial id -> group number
        self._next_group = 0
        self._current = None

    def set_search_properties(self, metric, mode, config, **spec):
        self._fill(metric, mode)
        return self.searcher.set_search_properties(metric, mode, config, **spec)

    def suggest(self, trial_id):
        group = self._groups.get(self._current) if self._current is not None else None
        if group is None or group["left"] == 0:
            cfg = self.searcher.suggest(f"repeat-group-{self._next_group}")
            if cfg is None or cfg == Searcher.FINISHED or not isinstance(cfg, dict):
                return cfg
            self._current = self._next_group
            self._next_group += 1
            group = self._groups[self._current] = {"config": cfg, "left": self.repeat, "live": 0, "scores": []}
        index = self.repeat - group["left"]
        group["left"] -= 1
        group["live"] += 1
        self._of_trial[trial_id] = self._current
        cfg = dict(group["config"])
        if self.set_index:
            cfg["__trial_index__"] = index
        return cfg

    def on_trial_result(self, trial_id, result):
        pass

    def on_trial_complete(self, trial_id, result=None, error=False):
        number = self._of_trial.pop(trial_id, None)
        group = self._groups.get(number)
        if group is None:
            return
        group["live"] -= 1
        value = (result or {}).get(self.metric) if not error else None
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            group["scores"].append(float(value))
        if group["live"] == 0 and group["left"] == 0:
            del self._groups[number]
            scores = group["scores"]
            mean = {self.metric: sum(scores) / len(scores)} if scores else None
            self.searcher.on_trial_complete(f"repeat-group-{number}", mean, error=mean is None)
