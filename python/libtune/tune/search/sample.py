"""Ray Tune's search-space functions (``ray.tune.search.sample``), as libtune's driver
takes them: each returns a domain that ``space_to_json`` turns into the search space
that ``tune run`` reads (docs/run.md, "The search space"), and that ``sample()`` draws
from here. The numbers are checked where the domain is made, as Ray does, so a bad
bound is an error at the line that wrote it."""

import math
import types
import numbers
import random as _random

__all__ = [
    "Domain", "Float", "Integer", "Categorical", "Function",
    "uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn",
    "randint", "qrandint", "lograndint", "qlograndint", "choice", "grid_search", "sample_from",
    "space_to_json",
]


def _number(name, value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}: {what} must be a finite number, not {value!r}")
    return value


def _whole(name, value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: {what} must be a whole number, not {value!r}")
    return int(value)


def _bounds(name, lower, upper, log=False, whole=False):
    check = _whole if whole else _number
    lower, upper = check(name, lower, "lower"), check(name, upper, "upper")
    if not lower < upper:
        raise ValueError(f"{name}({lower}, {upper}): the lower bound must be below the upper one")
    if log and lower <= 0:
        raise ValueError(f"{name}({lower}, {upper}): a log scale needs a lower bound > 0 (the log of a number "
                         f"<= 0 is undefined); use e.g. {name}({upper / 1e4:g}, {upper}), or a linear scale")
    return lower, upper


def _q(name, q, whole=False):
    q = (_whole if whole else _number)(name, q, "q")
    if q <= 0:
        raise ValueError(f"{name}: q must be > 0, not {q}")
    return q


def _base(name, base):
    base = _number(name, base, "base")
    if base <= 0 or base == 1:
        raise ValueError(f"{name}: base must be > 0 and not 1, not {base}")
    # A log-uniform distribution is the same in every base: libtune keeps none.
    return base


class Domain:
    """A parameter's domain. ``to_json()`` is its form in libtune's search space;
    ``sample()`` draws one value (uniformly, as the random search does)."""

    kind = ""

    def __init__(self, args):
        self.args = list(args)

    def to_json(self):
        return {self.kind: self.args}

    def sample(self, rng=None):
        raise NotImplementedError

    def __repr__(self):
        return f"{self.kind}({', '.join(repr(a) for a in self.args)})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_json() == other.to_json()

    def __hash__(self):
        return hash(repr(self))


class Float(Domain):
    def sample(self, rng=None):
        rng = rng or _random
        k = self.kind
        if k in ("randn", "qrandn"):
            x = rng.gauss(self.args[0], self.args[1])
        elif k in ("loguniform", "qloguniform"):
            x = math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1])))
        else:
            x = rng.uniform(self.args[0], self.args[1])
        if k.startswith("q"):
            q = self.args[2]
            x = round(x / q) * q
        return x


class Integer(Domain):
    def sample(self, rng=None):
        rng = rng or _random
        k, lo, hi = self.kind, self.args[0], self.args[1]
        if k == "randint":
            return rng.randrange(lo, hi)
        if k == "lograndint":
            return min(hi - 1, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        q = self.args[2]
        if k == "qrandint":
            return lo + q * rng.randrange(0, (hi - lo) // q + 1)
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))  # qlograndint
        return min(hi, max(lo, int(round(x / q) * q)))


class Categorical(Domain):
    kind = "choice"

    def __init__(self, categories):
        super().__init__([categories])
        self.categories = categories

    def to_json(self):
        return space_to_json(self, "choice")

    def sample(self, rng=None):
        return (rng or _random).choice(self.categories)

    def __repr__(self):
        return f"choice({self.categories!r})"


class Function(Domain):
    """``sample_from(fn)``: Ray calls ``fn(spec)`` in the driver for each trial. libtune's
    searches need a domain they can model; this one is refused where the space is
    turned into libtune's (``space_to_json``), saying what to write instead."""

    kind = "sample_from"

    def __init__(self, func):
        if not callable(func):
            raise ValueError(f"sample_from needs a function, not {func!r}")
        super().__init__([func])
        self.func = func

    def to_json(self):
        raise ValueError(
            "sample_from is not supported: libtune's searches (random, grid, TPE, GP, BOHB) draw from domains they "
            "can model. Write the distribution as a domain (tune.uniform, tune.loguniform, tune.randint, "
            "tune.choice, ...), or compute the value inside the trainable from sampled ones "
            "(e.g. config['width'] * 2)")

    def sample(self, rng=None):
        return self.func(None)

    def __repr__(self):
        return f"sample_from({getattr(self.func, '__name__', self.func)!r})"


def _make(cls, kind, *args):
    d = cls(args)
    d.kind = kind
    return d


def uniform(lower, upper):
    lower, upper = _bounds("uniform", lower, upper)
    return _make(Float, "uniform", lower, upper)


def quniform(lower, upper, q):
    lower, upper = _bounds("quniform", lower, upper)
    return _make(Float, "quniform", lower, upper, _q("quniform", q))


def loguniform(lower, upper, base=10):
    lower, upper = _bounds("loguniform", lower, upper, log=True)
    _base("loguniform", base)
    return _make(Float, "loguniform", lower, upper)


def qloguniform(lower, upper, q, base=10):
    lower, upper = _bounds("qloguniform", lower, upper, log=True)
    _base("qloguniform", base)
    return _make(Float, "qloguniform", lower, upper, _q("qloguniform", q))


def randn(mean=0.0, sd=1.0):
    mean, sd = _number("randn", mean, "mean"), _number("randn", sd, "sd")
    if sd <= 0:
        raise ValueError(f"randn({mean}, {sd}): sd must be > 0")
    return _make(Float, "randn", mean, sd)


def qrandn(mean, sd, q):
    mean, sd = _number("qrandn", mean, "mean"), _number("qrandn", sd, "sd")
    if sd <= 0:
        raise ValueError(f"qrandn({mean}, {sd}, {q}): sd must be > 0")
    return _make(Float, "qrandn", mean, sd, _q("qrandn", q))


def randint(lower, upper):
    """Integers in [lower, upper): upper excluded, as Ray's."""
    lower, upper = _bounds("randint", lower, upper, whole=True)
    return _make(Integer, "randint", lower, upper)


def qrandint(lower, upper, q=1):
    """Multiples of q from lower: upper included, as Ray's."""
    lower, upper = _bounds("qrandint", lower, upper, whole=True)
    return _make(Integer, "qrandint", lower, upper, _q("qrandint", q, whole=True))


def lograndint(lower, upper, base=10):
    lower, upper = _bounds("lograndint", lower, upper, log=True, whole=True)
    _base("lograndint", base)
    return _make(Integer, "lograndint", lower, upper)


def qlograndint(lower, upper, q, base=10):
    lower, upper = _bounds("qlograndint", lower, upper, log=True, whole=True)
    _base("qlograndint", base)
    return _make(Integer, "qlograndint", lower, upper, _q("qlograndint", q, whole=True))


def _values(name, values):
    """A non-empty list of values for ``name`` (choice, grid_search), or a ValueError."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} needs a list of values, not {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} needs at least one value, not an empty list")
    return values


def choice(categories):
    return Categorical(_values("choice", categories))


def grid_search(values):
    """Every value, each times num_samples: Ray's ``{"grid_search": values}``."""
    return {"grid_search": _values("grid_search", values)}


def sample_from(func):
    return Function(func)


_DOMAIN_KEYS = ("uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint",
                "lograndint", "qlograndint", "choice", "grid_search", "constant")


def _has_domain(value):
    if isinstance(value, Domain):
        return True
    if isinstance(value, dict):
        return any(_has_domain(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_domain(v) for v in value)
    return False


SAMPLE_FROM = "__libtune_sample_from__"
OBJECT = "__libtune_object__"


class Holes:
    """What a param_space holds that libtune's space cannot: sample_from functions (run
    by the driver, docs/hooks.md) and constants JSON cannot hold (objects, classes: given
    to the trials in the trainable's pickle). Each stands in the space as a constant
    placeholder, ``{"__libtune_sample_from__": i}`` or ``{"__libtune_object__": i}``."""

    def __init__(self):
        self.functions = []
        self.objects = []

    def function(self, fn):
        self.functions.append(fn)
        return {"constant": {SAMPLE_FROM: len(self.functions) - 1}}

    def object(self, value):
        self.objects.append(value)
        return {"constant": {OBJECT: len(self.objects) - 1}}


def fill_objects(cfg, objects):
    """A configuration with the objects' placeholders replaced by the objects."""
    if isinstance(cfg, dict):
        if len(cfg) == 1 and OBJECT in cfg and isinstance(cfg[OBJECT], int) and 0 <= cfg[OBJECT] < len(objects):
            return objects[cfg[OBJECT]]
        return {k: fill_objects(v, objects) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [fill_objects(v, objects) for v in cfg]
    return cfg


def space_to_json(space, where="param_space", holes=None):
    """``space`` (a Ray-style param_space: dicts, domains, grid_search, constants) as
    libtune's search space (JSON types only). A value that JSON cannot hold, a dict key
    that is not a string, or sample_from is a ValueError naming where it is; given
    ``holes`` (a Holes), sample_from and plain functions (Ray resolves both per trial)
    and other objects become its placeholders instead."""
    if holes is not None and (isinstance(space, Function) or isinstance(space, types.FunctionType)):
        return holes.function(space.func if isinstance(space, Function) else space)
    if isinstance(space, Function):
        try:
            space.to_json()
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    if isinstance(space, Categorical):
        return {"choice": [space_to_json(c, f"{where}.choice[{i}]") for i, c in enumerate(space.categories)]}
    if isinstance(space, Domain):
        return space.to_json()
    if isinstance(space, dict):
        out = {}
        for key, value in space.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: the key {key!r} is not a string (a configuration's keys are texts)")
            inner = f"{where}.{key}" if where else key
            if key == "grid_search" and len(space) == 1:
                try:
                    value = _values("grid_search", value)
                except ValueError:
                    raise ValueError(f"{where}: grid_search needs a non-empty list of values, not {value!r}") from None
                return {"grid_search": [space_to_json(v, f"{inner}[{i}]", holes) for i, v in enumerate(value)]}
            out[key] = space_to_json(value, inner, holes)
        # A dict that libtune's space would read as a domain ({"choice": [...]}, a weighted
        # choice): as a constant it is written as one; with a domain inside it cannot be said.
        if (len(out) == 1 and next(iter(out)) in _DOMAIN_KEYS) or set(out) == {"choice", "weights"}:
            if any(_has_domain(v) for v in space.values()):
                raise ValueError(f"{where}: a parameter named {next(iter(out))!r} that holds a domain reads as "
                                 f"libtune's {next(iter(out))} domain: rename the parameter")
            return {"constant": out}
        return out
    if isinstance(space, (list, tuple)):
        return [space_to_json(v, f"{where}[{i}]", holes) for i, v in enumerate(space)]
    if space is None or isinstance(space, (bool, str)):
        return space
    if isinstance(space, numbers.Integral):
        return int(space)
    if isinstance(space, numbers.Real):
        if not math.isfinite(space):
            raise ValueError(f"{where}: {space!r} cannot be a constant of the space (JSON has no NaN or infinity)")
        return float(space)
    if holes is not None:
        return holes.object(space)
    if callable(space):
        raise ValueError(f"{where}: a function ({getattr(space, '__name__', space)!r}) cannot go in the search space: "
                         f"libtune's search and schedulers run in its engine, not in Python. Give one of tune's "
                         f"domains (e.g. tune.uniform(0.0001, 0.02) for random.uniform(0.0001, 0.02)) or a list")
    raise ValueError(f"{where}: {type(space).__name__} {space!r} cannot go in the search space (numbers, texts, "
                     f"lists, dicts and tune's domains can): pass large objects with tune.with_parameters")
