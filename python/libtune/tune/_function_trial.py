"""A trial of a Python trainable: ``python -m libtune.tune._function_trial trainable.pkl
[--sys-path DIR ...]``, the command Tuner.fit() gives libtune's engine. It unpickles the
trainable (written by the driver with cloudpickle, shipped with the experiment's
folder), and runs it on the trial's config: a function is called (a dict it returns is
its last result), a Trainable class is stepped, checkpointed and restored. An
exception ends the trial in error with its traceback on standard error, whose last
line is the trial's error headline."""

import os
import pickle
import signal
import sys

import libtune

from . import _session
from ._session import Checkpoint


def _args(argv):
    if len(argv) < 1:
        raise SystemExit("usage: python -m libtune.tune._function_trial TRAINABLE.pkl [--sys-path DIR ...]")
    path, paths, rest = argv[0], [], argv[1:]
    while rest:
        if rest[0] != "--sys-path" or len(rest) < 2:
            raise SystemExit(f"libtune.tune._function_trial: unexpected argument {rest[0]!r}")
        paths.append(rest[1])
        rest = rest[2:]
    return path, paths


def _load(path, paths):
    # The driver's folders, where they exist on this node, after the trial's own: a
    # module of the driver pickled by reference is found as when the driver ran it.
    for folder in paths:
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)
    with open(path, "rb") as f:
        return pickle.load(f)


def _run_function(fn, config, params):
    out = fn(config, **params)
    if hasattr(out, "__next__"):  # a generator: each value is a result
        for result in out:
            if result is not None:
                _session.report(result)
        return
    if isinstance(out, dict):
        _session.report(out)
    elif out is not None:
        raise TypeError(f"the trainable returned {type(out).__name__}: a trainable function returns nothing or its "
                        f"last result (a dict)")


def _save(trainable, iteration):
    folder = libtune.checkpoint_dir(iteration)
    state = trainable.save_checkpoint(folder)
    if isinstance(state, dict):  # kept as Checkpoint.from_dict keeps one
        with open(os.path.join(folder, Checkpoint.DICT_FILE), "wb") as f:
            pickle.dump(state, f)
    elif state is not None and not (isinstance(state, (str, os.PathLike)) and
                                    os.path.realpath(state) == os.path.realpath(folder)):
        raise TypeError(f"{type(trainable).__name__}.save_checkpoint() returned {type(state).__name__}: write the "
                        f"files into checkpoint_dir and return None, or return a dict")
    return folder


_checkpoint_asked = False


def _ask_checkpoint(signum, frame):
    """SIGURG: the experiment asks for a checkpoint now (a callback's should_checkpoint):
    made after the step in progress."""
    global _checkpoint_asked
    _checkpoint_asked = True


def _run_class(cls, config, params, options):
    global _checkpoint_asked
    libtune.should_stop()  # stop-aware: a stop ends the step in progress, then the loop
    signal.signal(signal.SIGURG, _ask_checkpoint)
    trainable = cls(config, **params)
    start = libtune.restore_dir()
    if start:
        if os.path.exists(os.path.join(start, Checkpoint.DICT_FILE)):
            trainable.load_checkpoint(Checkpoint(start).to_dict())
        else:
            trainable.load_checkpoint(start)
        trainable._iteration = libtune.restore_iteration() or 0
    every = options.get("checkpoint_frequency", 0)
    at_end = options.get("checkpoint_at_end", False)
    try:
        while True:
            result = trainable.step()
            if not isinstance(result, dict):
                raise TypeError(f"{cls.__name__}.step() returned {type(result).__name__}: return the step's "
                                f"result as a dict of metrics")
            trainable._iteration += 1
            iteration = trainable._iteration
            done = bool(result.get("done", False))
            save = (every and iteration % every == 0) or (done and at_end) or _checkpoint_asked
            _checkpoint_asked = False
            if save:
                _save(trainable, iteration)
                libtune.report_checkpoint(iteration)  # before its result, which may end the trial
            metrics = _session.ray_metrics(result)
            if _session.add_training_iteration or not metrics:
                metrics["training_iteration"] = iteration
            go_on = libtune.report(metrics, iteration=iteration)
            limit = _session.max_iterations
            if done or not go_on or (limit is not None and iteration >= limit):
                if at_end and not save:
                    _save(trainable, iteration)
                    libtune.report_checkpoint(iteration)
                break
    finally:
        trainable.cleanup()


def main(argv):
    path, paths = _args(argv)
    payload = _load(path, paths)
    config = libtune.config()
    if payload.get("objects"):  # the param_space's constants that JSON cannot hold
        from .search.sample import fill_objects
        config = fill_objects(config, payload["objects"])
    trainable, params = payload["trainable"], payload.get("parameters", {})
    _session.add_training_iteration = payload.get("add_training_iteration", False)
    _session.max_iterations = payload.get("max_iterations")
    creator = payload.get("trial_name_creator")
    if creator is not None:
        from .trainable import TrialInfo
        os.environ["LIBTUNE_TRIAL_NAME"] = str(creator(TrialInfo(libtune.trial_id(), config, payload.get("name", ""),
                                                              payload.get("experiment_name", ""))))
    try:
        if isinstance(trainable, type):
            _run_class(trainable, config, params, payload)
        else:
            _run_function(trainable, config, params)
    except _session.Stopped:
        pass  # the scheduler or a stop criterion ended it: a trial that ended well


if __name__ == "__main__":
    main(sys.argv[1:])
