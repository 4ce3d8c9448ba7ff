"""Ray's ray.tune.schedulers.pb2: PB2, Population Based Bandits (Parker-Holder et al.,
2020). The engine's PBT exploits (the bottom quantile clones a top trial's checkpoint);
where PBT would perturb at random, PB2 chooses the new values of ``hyperparam_bounds``
in the driver: a Gaussian process over (time, hyperparameters) -> the metric's change
per iteration, with a kernel that forgets old data as time passes, and the point of
the highest upper confidence bound at the present time, the other running trials'
points counted as pending (so two trials are not sent to one place). Needs numpy."""

import math
import numbers

from . import PopulationBasedTraining
from ..callback import Callback

__all__ = ["PB2"]

_MAX_ROWS = 500  # the newest observations the model keeps


class _Observer(Callback):
    """Collects (iteration, the trial's bounded parameters, the metric's change)."""

    def __init__(self, pb2):
        self.pb2 = pb2

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.pb2._observe(trial, result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.pb2._last.pop(trial.trial_id, None)
        self.pb2._running.pop(trial.trial_id, None)

    on_trial_error = on_trial_complete


class PB2(PopulationBasedTraining):
    """PB2: PBT whose explore step is a time-varying GP bandit over ``hyperparam_bounds``
    ({name: [lower, upper]}, continuous). Other arguments as PopulationBasedTraining."""

    _name = "PB2"

    def __init__(self, time_attr=None, metric=None, mode=None, perturbation_interval=None, hyperparam_bounds=None,
                 quantile_fraction=0.25, log_config=True, require_attrs=True, synch=False, custom_explore_fn=None,
                 seed=None):
        try:
            import numpy  # noqa: F401
        except ImportError:
            raise ImportError("PB2 fits a Gaussian process in this program, with numpy, which is not installed: "
                              "pip install numpy (or use PopulationBasedTraining)") from None
        if not isinstance(hyperparam_bounds, dict) or not hyperparam_bounds:
            raise ValueError("PB2: hyperparam_bounds is required: {name: [lower, upper]} of the parameters PB2 "
                             "chooses, e.g. {'lr': [1e-4, 0.1]}")
        from ..search.sample import uniform
        self.hyperparam_bounds = {}
        for key, b in hyperparam_bounds.items():
            if isinstance(b, dict):
                raise ValueError(f"PB2: hyperparam_bounds[{key!r}] is nested; give flat names with [lower, upper]")
            if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(
                    isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) for x in b)
                    and b[0] < b[1]):
                raise ValueError(f"PB2: hyperparam_bounds[{key!r}] must be [lower, upper] with lower < upper, "
                                 f"not {b!r}")
            self.hyperparam_bounds[key] = (float(b[0]), float(b[1]))
        self._user_explore = custom_explore_fn
        if custom_explore_fn is not None and not callable(custom_explore_fn):
            raise ValueError(f"PB2: custom_explore_fn must be a function of the config, not {custom_explore_fn!r}")
        super().__init__(time_attr=time_attr, metric=metric, mode=mode, perturbation_interval=perturbation_interval,
                         hyperparam_mutations={k: uniform(lo, hi) for k, (lo, hi) in self.hyperparam_bounds.items()},
                         quantile_fraction=quantile_fraction, resample_probability=0.0, custom_explore_fn=self._explore,
                         log_config=log_config, require_attrs=require_attrs, synch=synch)
        self._observer = _Observer(self)
        self._rows = []  # (t, x in [0, 1]^d, y)
        self._last = {}  # trial id -> (t, the metric)
        self._running = {}  # trial id -> x
        self._seed = seed
        self._rng = None

    # -- the data -----------------------------------------------------------------------

    def _x(self, config):
        out = []
        for key, (lo, hi) in self.hyperparam_bounds.items():
            v = config.get(key) if isinstance(config, dict) else None
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                return None
            out.append(min(1.0, max(0.0, (float(v) - lo) / (hi - lo))))
        return out

    def _observe(self, trial, result):
        value, t = result.get(self.metric), result.get("training_iteration")
        x = self._x(trial.config)
        if x is None or not isinstance(value, numbers.Real) or isinstance(value, bool) or not isinstance(t, int):
            return
        value = float(value) if self.mode != "min" else -float(value)
        if not math.isfinite(value):
            return
        self._running[trial.trial_id] = x
        last = self._last.get(trial.trial_id)
        self._last[trial.trial_id] = (t, value)
        if last is None or t <= last[0]:
            return
        self._rows.append((float(t), x, (value - last[1]) / (t - last[0])))
        if len(self._rows) > _MAX_ROWS:
            del self._rows[:len(self._rows) - _MAX_ROWS]

    # -- the choice ---------------------------------------------------------------------

    def _explore(self, config):
        import numpy as np
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        new = dict(config)
        d = len(self.hyperparam_bounds)
        if len(self._rows) < 2:
            x = self._rng.uniform(size=d)
        else:
            x = self._select(np, d, self._x(config))
        for (key, (lo, hi)), xi in zip(self.hyperparam_bounds.items(), x):
            new[key] = float(lo + float(xi) * (hi - lo))
        if self._user_explore is not None:
            new = self._user_explore(new)
        return new

    def _select(self, np, d, current):
        t = np.array([r[0] for r in self._rows])
        X = np.array([r[1] for r in self._rows])
        y = np.array([r[2] for r in self._rows])
        y = (y - y.mean()) / (y.std() + 1e-9)
        now = t.max()
        lengths, epsilons, noise = (0.1, 0.2, 0.4, 0.8), (0.01, 0.1, 0.3), 0.05
        best = None
        for ell in lengths:  # the kernel's parameters: the best log marginal likelihood on a small grid
            for eps in epsilons:
                K = _kernel(np, t, X, t, X, ell, eps) + noise * np.eye(len(y))
                try:
                    L = np.linalg.cholesky(K)
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
                fit = -0.5 * y @ alpha - np.log(np.diag(L)).sum()
                if best is None or fit > best[0]:
                    best = (fit, ell, eps, L, alpha)
        if best is None:
            return self._rng.uniform(size=d)
        _, ell, eps, L, alpha = best
        cand = self._rng.uniform(size=(1000, d))
        if current is not None:
            near = np.clip(np.array(current) + self._rng.normal(scale=0.1, size=(200, d)), 0, 1)
            cand = np.vstack([cand, near])
        tc = np.full(len(cand), now)
        ks = _kernel(np, tc, cand, t, X, ell, eps)
        mean = ks @ alpha
        v = np.linalg.solve(L, ks.T)
        var = np.clip(1.0 - (v * v).sum(axis=0), 1e-12, None)
        # The other running trials' points as pending: the variance once they are known.
        pending = [x for x in self._running.values() if x is not None]
        if pending:
            P = np.array(pending)
            tp = np.full(len(P), now)
            Xa, ta = np.vstack([X, P]), np.concatenate([t, tp])
            Ka = _kernel(np, ta, Xa, ta, Xa, ell, eps) + noise * np.eye(len(ta))
            try:
                La = np.linalg.cholesky(Ka)
                va = np.linalg.solve(La, _kernel(np, tc, cand, ta, Xa, ell, eps).T)
                var = np.clip(1.0 - (va * va).sum(axis=0), 1e-12, None)
            except np.linalg.LinAlgError:
                pass
        n = len(y)
        beta = 2 * math.log(max(2, n) ** 2 * math.pi ** 2 / 0.6) / 5  # GP-UCB's schedule, scaled down
        return cand[int(np.argmax(mean + math.sqrt(beta) * np.sqrt(var)))]

    def to_json(self):
        out = super().to_json()
        out["custom_explore"] = True
        return out


def _kernel(np, t1, X1, t2, X2, ell, eps):
    """The time-varying kernel: a squared exponential in the parameters times
    (1 - eps) ** (|t - t'| / 2), which forgets what was true long ago."""
    d2 = ((X1[:, None, :] - X2[None, :, :]) ** 2).sum(axis=2)
    dt = np.abs(t1[:, None] - t2[None, :])
    return np.exp(-0.5 * d2 / ell ** 2) * (1 - eps) ** (dt / 2)
