"""Inside a trial, Ray Tune's calls (``ray.tune.report``, ``get_checkpoint``,
``get_context``, ``Checkpoint``) on libtune's trial module: a result is
``libtune.report``, a checkpoint's files go to the trial's checkpoint folder and are
reported there, a trial that the scheduler stops does not return from ``report``."""

import contextlib
import os
import shutil
import sys
import tempfile
import weakref

import libtune as _trial

__all__ = ["Checkpoint", "report", "get_checkpoint", "get_context", "TuneContext"]


class Stopped(SystemExit):
    """Raised by report() when the trial was stopped (a scheduler, a stop criterion):
    as in Ray the call does not return. A trial run by Tuner.fit() ends well on it."""

    def __init__(self):
        super().__init__(143)


_warned = set()
add_training_iteration = False  # set by the trial runner when the experiment tunes no metric of the script's
max_iterations = None  # the experiment's stop criterion, set by the trial runner: the trial ends at it itself


def flatten(value, prefix, out):
    """The nested dict ``value`` into ``out`` as {"prefix" + "a/b": ...} (Ray's names for
    nested results and configs in its CSV and data frames)."""
    for key, inner in value.items():
        name = f"{prefix}{key}"
        if isinstance(inner, dict):
            flatten(inner, name + "/", out)
        else:
            out[name] = inner


def ray_metrics(result):
    """A Ray result dict as libtune's metrics: nested dicts flattened with "/" (Ray's
    names in its CSV and TensorBoard output), booleans as 0 and 1, ``done`` left to the
    caller. A value that is not a number (a text, a list, None) cannot be stored by
    libtune: it is left out, and said once per name on standard error."""
    flat = {}
    flatten(result, "", flat)
    out = {}
    for name, value in flat.items():
        if name == "done":
            continue
        if isinstance(value, bool):
            value = int(value)
        try:
            _trial._metric_value(name, value)  # what libtune.report takes (numpy and torch scalars too)
            out[name] = value
        except TypeError:
            if name in _warned:
                continue
            _warned.add(name)
            sys.stderr.write(f"libtune: tune.report: {name!r} is {type(value).__name__} ({value!r:.60}); libtune "
                             f"stores numbers only, so it is left out of the results (said once)\n")
    return out


class Checkpoint:
    """A checkpoint: a folder of files (Ray's ``Checkpoint``, local folders only).
    ``iteration``: the training iteration it is from, for one libtune stored (None for
    one made by hand)."""

    def __init__(self, path, iteration=None):
        self.path = os.fspath(path)
        self.iteration = iteration

    @classmethod
    def from_directory(cls, path):
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"Checkpoint.from_directory({path!r}): no such folder; write the "
                                    f"checkpoint's files into a folder first")
        return cls(os.path.abspath(path))

    DICT_FILE = "_dict_checkpoint.pkl"

    @classmethod
    def from_dict(cls, data):
        """A checkpoint holding a dict (Ray 2.0-2.6's ``Checkpoint.from_dict``), pickled
        into a new temporary folder of libtune's own: removed once tune.report() stored
        it (the checkpoint is then the stored copy), else with the checkpoint (garbage, or
        the process's end)."""
        import pickle
        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict: give a dict, not {type(data).__name__}")
        folder = tempfile.mkdtemp(prefix="checkpoint-")
        with open(os.path.join(folder, cls.DICT_FILE), "wb") as f:
            pickle.dump(data, f)
        checkpoint = cls(folder)
        checkpoint._remove_folder = weakref.finalize(checkpoint, shutil.rmtree, folder, True)
        return checkpoint

    def to_dict(self):
        """The dict of a checkpoint made with from_dict."""
        import pickle
        path = os.path.join(self.path, self.DICT_FILE)
        if not os.path.exists(path):
            raise ValueError(f"Checkpoint.to_dict: {self.path} was not made with Checkpoint.from_dict; read its files "
                             f"with as_directory()")
        with open(path, "rb") as f:
            return pickle.load(f)

    def to_directory(self, path=None):
        """Copies the checkpoint's files into ``path`` (a new temporary folder when None);
        returns the folder."""
        if path is None:
            path = tempfile.mkdtemp(prefix="checkpoint-")
        path = os.fspath(path)
        shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    @contextlib.contextmanager
    def as_directory(self):
        """The checkpoint's folder itself (it is local): read it, do not change it."""
        yield self.path

    def __repr__(self):
        if self.iteration is None:
            return f"Checkpoint(path={self.path!r})"
        return f"Checkpoint(path={self.path!r}, iteration={self.iteration})"

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and os.path.abspath(self.path) == os.path.abspath(other.path)

    def __hash__(self):
        return hash(os.path.abspath(self.path))


def _outside(call):
    return RuntimeError(
        f"tune.{call}() was called outside a trial: libtune runs the function as a trial when the tuning "
        f"starts it (Tuner(trainable).fit() or tune.run(trainable)); call the function through them. "
        f"(libtune.report, the trial module's own call, prints its result instead when not in a trial.)")


def report(metrics, *, checkpoint=None):
    """Reports one result (``metrics``: a dict of name -> number), with a checkpoint
    whose files are kept as this result's (``checkpoint``: a Checkpoint). When the
    scheduler has stopped the trial, this call does not return: the trial ends
    (SystemExit), as in Ray."""
    if not _trial.in_trial():
        raise _outside("report")
    if not isinstance(metrics, dict):
        raise TypeError(f"tune.report(metrics): metrics must be a dict of name -> number, not "
                        f"{type(metrics).__name__}; e.g. tune.report({{'loss': 0.3}})")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"tune.report(checkpoint=...): give a tune.Checkpoint (Checkpoint.from_directory(path)), "
                        f"not {type(checkpoint).__name__}")
    done = bool(metrics.get("done", False))
    iteration = _trial._next_iteration()
    metrics = ray_metrics(metrics)
    if add_training_iteration or not metrics:
        metrics["training_iteration"] = iteration
    if checkpoint is not None:
        target = _trial.checkpoint_dir(iteration)
        if os.path.realpath(checkpoint.path) != os.path.realpath(target):
            shutil.copytree(checkpoint.path, target, dirs_exist_ok=True)
        remove = getattr(checkpoint, "_remove_folder", None)
        if remove is not None:  # from_dict's temporary folder: the stored copy stands in for it
            checkpoint.path = target
            remove()
    if checkpoint is not None:
        # Before the result: the result may end the trial (a stop criterion, the
        # scheduler), whose SIGTERM would otherwise come between the two lines.
        _trial.report_checkpoint(iteration)
    go_on = _trial.report(metrics, iteration=iteration)
    if not go_on or done or (max_iterations is not None and iteration >= max_iterations):
        raise Stopped()  # stopped (or done: True): as in Ray, the call does not return


def get_checkpoint():
    """The checkpoint this trial starts from (a restart, a resumed experiment, PBT's
    donor), or None."""
    folder = _trial.restore_dir()
    return Checkpoint(folder) if folder else None


class TuneContext:
    """What a trial knows of itself (Ray's ``tune.get_context()``)."""

    def get_trial_id(self):
        return os.environ.get("TUNE_TRIAL_ID", "")

    def get_trial_name(self):
        return os.environ.get("LIBTUNE_TRIAL_NAME") or os.environ.get("TUNE_TRIAL_ID", "")

    def get_trial_dir(self):
        return _trial.trial_dir()

    def get_experiment_name(self):
        return os.environ.get("LIBTUNE_EXPERIMENT_NAME", "")

    def get_node_id(self):
        return _trial.node_id()

    def get_trial_resources(self):
        """The cards this trial holds: ``{"gpu": shares together, "gpus": [Gpu, ...]}``."""
        cards = _trial.gpus()
        return {"gpu": sum(g.share for g in cards), "gpus": cards}


def get_context():
    if not _trial.in_trial():
        raise _outside("get_context")
    return TuneContext()
