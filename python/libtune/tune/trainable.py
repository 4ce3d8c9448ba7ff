"""What a trial runs, under Ray Tune's names: a function of its config or a ``Trainable``
class, with its resources (``with_resources``, ``PlacementGroupFactory``) and large
objects (``with_parameters``). The driver pickles it (cloudpickle) into the experiment
folder; each trial unpickles it and runs it (libtune.tune._function_trial)."""

import inspect
import math
import numbers
import os

__all__ = ["Trainable", "with_resources", "with_parameters", "PlacementGroupFactory"]


class Trainable:
    """A class trainable (Ray's ``tune.Trainable``): ``setup(config)`` once, ``step()``
    returns one result (a dict) per iteration, ``save_checkpoint(checkpoint_dir)`` writes
    the state into the folder (or returns a dict, which libtune keeps for you),
    ``load_checkpoint(checkpoint)`` reads it back (the folder, or that dict),
    ``cleanup()`` at the end. A result with ``done: True`` ends the trial."""

    def __init__(self, config=None, **kwargs):
        import libtune
        self.config = dict(config or {})
        self._iteration = 0
        self._trial_id = libtune.trial_id()
        self._logdir = libtune.trial_dir()
        self.setup(dict(self.config), **kwargs)

    # What a subclass writes.
    def setup(self, config, **kwargs):
        pass

    def step(self):
        raise NotImplementedError(f"{type(self).__name__}.step(): a Trainable returns one result dict per step")

    def save_checkpoint(self, checkpoint_dir):
        return None

    def load_checkpoint(self, checkpoint):
        pass

    def cleanup(self):
        pass

    def reset_config(self, new_config):
        return False

    # What it may read.
    @property
    def iteration(self):
        return self._iteration

    @property
    def training_iteration(self):
        return self._iteration

    @property
    def trial_id(self):
        return self._trial_id

    @property
    def trial_name(self):
        return os.environ.get("LIBTUNE_TRIAL_NAME") or self._trial_id

    @property
    def logdir(self):
        return self._logdir

    @property
    def trial_resources(self):
        import libtune
        cards = libtune.gpus()
        return {"gpu": sum(g.share for g in cards), "gpus": cards}


class TrialInfo:
    """What trial_name_creator gets (Ray's Trial, the parts libtune has)."""

    def __init__(self, trial_id, config, trainable_name, experiment_name):
        self.trial_id, self.config = trial_id, config
        self.trainable_name, self.experiment_name = trainable_name, experiment_name

    def __str__(self):
        return self.trial_id


def trainable_name(trainable):
    """The name of the function or class (through with_resources / with_parameters)."""
    inner = unwrap(trainable)[0]
    return getattr(inner, "__name__", None) or type(inner).__name__


def _check_trainable(trainable, where):
    if isinstance(trainable, str):
        raise TypeError(f"{where}: a trainable registered by name ({trainable!r}) is Ray's registry, which libtune "
                        f"does not have: pass the function or Trainable class itself")
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError(f"{where}: the class {trainable.__name__} is not a libtune.tune.Trainable: subclass it "
                            f"(setup, step, save_checkpoint, load_checkpoint), or pass a function of the config")
        return
    if not callable(trainable):
        raise TypeError(f"{where}: the trainable must be a function of its config or a Trainable class, not "
                        f"{type(trainable).__name__}")


def _amount(where, key, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: {key}={value!r}: give a number >= 0")
    return int(value) if float(value).is_integer() else float(value)


def resources_to_json(resources, where):
    """A Ray resource dict ({"cpu": 1, "gpu": 0.25, "memory": bytes, custom: n}; Ray's
    "CPU"/"GPU" spellings too) as libtune's resources_per_trial. A GPU request that is
    neither whole nor a share of one card is refused here, naming the trainable."""
    if not isinstance(resources, dict):
        raise TypeError(f"{where}: resources must be a dict such as {{'cpu': 1, 'gpu': 0.25}}, not "
                        f"{type(resources).__name__}")
    out = {}
    for key, value in resources.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}: a resource's name must be a text, not {key!r}")
        name = key.lower() if key.lower() in ("cpu", "gpu", "memory") else key
        if name in ("object_store_memory", "accelerator_type"):
            raise ValueError(f"{where}: {key} is Ray's object store / accelerator type, which libtune does not have: "
                             f"leave it out (memory is the host memory a trial may use, enforced)")
        if name in out:
            raise ValueError(f"{where}: {key} is given twice (as {name} and {key})")
        if name == "gpu" and value == "auto":
            out[name] = "auto"
            continue
        if name in ("memory", "gpu_memory") and isinstance(value, str):
            out[name] = value  # "4GiB": libtune's quantities
            continue
        amount = _amount(where, key, value)
        if name == "gpu" and amount > 1 and not float(amount).is_integer():
            raise ValueError(f"{where}: gpu={value!r} is neither whole nor a share of one card: ask for a whole number "
                             f"of GPUs (1, 2, ...) or a share below 1 (e.g. 0.5)")
        out[name] = amount
    return out


class PlacementGroupFactory:
    """Several bundles per trial, placed together (Ray's ``PlacementGroupFactory``):
    ``PlacementGroupFactory([{"CPU": 1, "GPU": 1}, {"CPU": 4}], strategy="PACK")``.
    Strategies: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD."""

    _STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

    def __init__(self, bundles, strategy="PACK", *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"PlacementGroupFactory: {', '.join(list(kwargs) or ['more positional arguments'])} "
                            f"not supported: give the bundles and a strategy")
        if not isinstance(bundles, (list, tuple)) or not bundles:
            raise ValueError("PlacementGroupFactory: bundles must be a non-empty list of resource dicts, e.g. "
                             "[{'CPU': 1, 'GPU': 1}]")
        if not isinstance(strategy, str) or strategy.upper() not in self._STRATEGIES:
            raise ValueError(f"PlacementGroupFactory: strategy={strategy!r}: use one of {', '.join(self._STRATEGIES)}")
        self.bundles = [resources_to_json(b, f"PlacementGroupFactory bundle {i}") for i, b in enumerate(bundles)]
        self.strategy = strategy.upper()

    @property
    def required_resources(self):
        total = {}
        for b in self.bundles:
            for k, v in b.items():
                if isinstance(v, numbers.Real):
                    total[k] = total.get(k, 0) + v
        return total

    def __repr__(self):
        return f"PlacementGroupFactory({self.bundles!r}, strategy={self.strategy!r})"

    def __eq__(self, other):
        return isinstance(other, PlacementGroupFactory) and (self.bundles, self.strategy) == (other.bundles,
                                                                                              other.strategy)


def with_resources(trainable, resources):
    """The trainable with the resources each of its trials holds: a dict
    ({"cpu": 1, "gpu": 0.25}), a PlacementGroupFactory, or (Ray's) a function of the
    trial's config returning either, which the driver calls for each new trial before it
    is placed (docs/hooks.md)."""
    where = f"with_resources({trainable_name(trainable)})"
    _check_trainable(trainable, where)
    if callable(resources) and not isinstance(resources, (dict, PlacementGroupFactory)):
        request = resources
    elif isinstance(resources, PlacementGroupFactory):
        request = resources
    else:
        request = resources_to_json(resources, where)
    inner, _, params = unwrap(trainable)
    return _Trainable(inner, request, params)


def with_parameters(trainable, **kwargs):
    """The trainable with large objects passed to it (Ray's ``tune.with_parameters``):
    a function is called as ``trainable(config, **kwargs)``, a Trainable's ``setup`` as
    ``setup(config, **kwargs)``. The objects are pickled once into the experiment folder
    and shipped with it to every node, not put in each trial's config."""
    where = f"with_parameters({trainable_name(trainable)})"
    _check_trainable(trainable, where)
    inner, resources, params = unwrap(trainable)
    return _Trainable(inner, resources, {**params, **kwargs})


class _Trainable:
    """A trainable with its resources and parameters; called like the trainable itself."""

    def __init__(self, inner, resources, parameters):
        self._libtune_trainable = inner
        self._libtune_resources = resources
        self._libtune_parameters = parameters
        self.__name__ = trainable_name(inner)

    def __call__(self, config, **kwargs):
        return self._libtune_trainable(config, **{**self._libtune_parameters, **kwargs})

    def __repr__(self):
        return f"<trainable {self.__name__}>"


def unwrap(trainable):
    """(the function or class, its resources or None, its parameters)."""
    if isinstance(trainable, _Trainable):
        return trainable._libtune_trainable, trainable._libtune_resources, dict(trainable._libtune_parameters)
    return trainable, None, {}


def _system_dirs():
    import sys
    libtune_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                          libtune_dir)}


def is_user_path(path, system=None):
    """True for a file or folder of the user's own code: not the interpreter's, not an
    installed package's (site-packages, dist-packages), not libtune's."""
    real = os.path.realpath(path)
    if "-packages" + os.sep in real + os.sep:
        return False
    return not any(real == s or real.startswith(s + os.sep) for s in (system or _system_dirs()))


def script_dirs():
    """The folders the driver's own modules come from: its script's, its working
    folder and the user's folders on its sys.path (what Ray puts on a local trial's
    sys.path), in that order."""
    import sys
    system = _system_dirs()
    dirs = []
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        dirs.append(os.path.dirname(os.path.abspath(main_file)))
    dirs.append(os.getcwd())
    dirs += [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
    return [d for d in dict.fromkeys(dirs) if is_user_path(d, system)]
