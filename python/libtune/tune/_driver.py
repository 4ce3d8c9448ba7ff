"""The driver's side of user code in the engine's decisions (docs/hooks.md; the protocol
is libtune/tune/tuner/DRIVER.md). When a script brings code of its own that takes part
in a decision (a Callback, a Stopper or a function, a Searcher or TrialScheduler of its
own, sample_from, a PBT function, a resources function, Optuna's own sampler), Tuner.fit()
gives ``tune run`` one end of a socketpair (``--driver-fd``) and serves the other here,
on the thread that called fit(): the engine sends what happened (trials starting,
results, checkpoints, ends) and what it asks (a configuration, a trial's preparation, an
explore), and this answers. User code runs one hook at a time, in the order the events
happened, never in the engine's process.

A hook that raises ends the experiment (every trial stops) and fit() raises that
exception; a hook that does not return within its time (``LIBTUNE_HOOK_TIMEOUT_S``,
600 s by default) is interrupted and reported the same way. The driver dying ends the
experiment too: the engine sees its socket close and stops every trial; Tuner.restore
continues it, the hooks' state (the searcher's, the callbacks' get_state) restored from
``tuner/hooks.pkl``."""

import json
import math
import numbers
import os
import pickle
import random
import select
import signal
import socket
import sys
import threading
import time
import traceback

from .experiment.trial import Trial
from .result import SHOULD_CHECKPOINT

__all__ = ["Hooks", "HookError"]

_STATE_FILE = "hooks.pkl"
SAMPLE_FROM = "__libtune_sample_from__"


class HookError(RuntimeError):
    """Raised by fit() when user code the engine consulted failed (its own exception is
    the cause)."""


class _HookTimeout(BaseException):
    """Raised into a hook that ran past its time (BaseException: a hook's own
    ``except Exception`` does not swallow it)."""


def _jsonable(value, where):
    """``value`` with numpy's numbers as Python's; a ValueError naming ``where`` for what
    JSON cannot hold."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"{where} is {value!r}: a configuration's numbers must be finite")
        return f
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if hasattr(value, "tolist"):  # a numpy array
        return _jsonable(value.tolist(), where)
    raise ValueError(f"{where} is {type(value).__name__} {value!r}: a configuration holds numbers, texts, lists and "
                     f"dicts (pass objects with tune.with_parameters)")


class _Spec(dict):
    """What a sample_from function gets (Ray's ``spec``): ``spec.config.x`` or
    ``spec["config"]["x"]``. Reading a value another sample_from has not drawn yet raises
    _Unresolved, and the function is called again once that one is drawn."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if isinstance(value, dict) and not isinstance(value, _Spec):
            if set(value) == {SAMPLE_FROM}:
                raise _Unresolved(key)
            value = _Spec(value)
            dict.__setitem__(self, key, value)
        return value

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default


class _Unresolved(Exception):
    pass


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(dict.__getitem__(value, k)) for k in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _holes(cfg, path=()):
    """The (path, index) of every sample_from placeholder in a configuration."""
    if isinstance(cfg, dict):
        if set(cfg) == {SAMPLE_FROM}:
            return [(path, cfg[SAMPLE_FROM])]
        out = []
        for k, v in cfg.items():
            out += _holes(v, path + (k,))
        return out
    if isinstance(cfg, list):
        out = []
        for i, v in enumerate(cfg):
            out += _holes(v, path + (i,))
        return out
    return []


def _set(cfg, path, value):
    for p in path[:-1]:
        cfg = cfg[p]
    cfg[path[-1]] = value


def resolve_sample_from(cfg, functions):
    """The configuration with each sample_from drawn: its function called with the spec
    (Ray's), those that read another's value after it (as many passes as it takes)."""
    out = json.loads(json.dumps(cfg))
    pending = _holes(out)
    while pending:
        left = []
        for path, index in pending:
            fn = functions[index]
            spec = _Spec({"config": out})
            try:
                value = fn(spec)
            except _Unresolved:  # it read one not drawn yet: called again after it
                left.append((path, index))
                continue
            where = "param_space[" + "][".join(repr(p) for p in path) + "]"
            _set(out, path, _jsonable(_plain(value) if isinstance(value, dict) else value,
                                      f"{where} (sample_from {getattr(fn, '__name__', fn)})"))
        if len(left) == len(pending):
            names = ", ".join(".".join(str(p) for p in path) for path, _ in left)
            raise ValueError(f"sample_from: {names} read each other's values (or a key the config does not have), "
                             f"so none can be drawn first: make one of them not depend on the others")
        pending = left
    return out


class _Controller:
    """What a TrialScheduler of the user's gets as ``tune_controller``."""

    def __init__(self, driver):
        self._driver = driver

    def get_trials(self):
        return list(self._driver.trials.values())

    def get_live_trials(self):
        return [t for t in self._driver.trials.values() if not t.is_finished()]


class Hooks:
    """The user code of one experiment, as Tuner.fit() found it."""

    def __init__(self, *, metric, mode, trainable_name, callbacks=(), stoppers=(), searcher=None, scheduler=None,
                 sample_from=(), resources_fn=None, mutations=None, explore_fn=None, stop=None, space=None,
                 trial_name_creator=None, dirname_creator=None, objects=()):
        self.metric, self.mode = metric, mode
        self.trainable_name = trainable_name
        self.callbacks = list(callbacks)
        self.stoppers = list(stoppers)
        self.searcher = searcher
        self.scheduler = scheduler
        self.sample_from = list(sample_from)
        self.resources_fn = resources_fn
        self.mutations = dict(mutations or {})  # JSON pointer -> the function (or domain) that draws it
        self.explore_fn = explore_fn
        self.stop = stop
        self.space = space
        self.trial_name_creator = trial_name_creator
        self.dirname_creator = dirname_creator
        self.objects = list(objects)

    def any(self):
        return bool(self.callbacks or self.stoppers or self.searcher or self.scheduler or self.sample_from or
                    self.resources_fn or self.mutations or self.explore_fn or self.dirname_creator)

    def serves(self):
        """The experiment file's ``driver`` key: what the engine asks of this driver."""
        out = {"results": bool(self.callbacks or self.stoppers or self.searcher or self.scheduler),
               "trials": bool(self.callbacks or self.searcher or self.scheduler or self.dirname_creator),
               "prepare": bool(self.sample_from or self.resources_fn),
               "explore": bool(self.mutations or self.explore_fn)}
        if self.searcher is not None:
            out["searcher"] = type(self.searcher).__name__
        if self.scheduler is not None:
            out["scheduler"] = type(self.scheduler).__name__
        timeout = hook_timeout()
        out["timeout_s"] = timeout + 60  # the engine waits longer than a hook may run here
        return out


def hook_timeout():
    text = os.environ.get("LIBTUNE_HOOK_TIMEOUT_S", "600")
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not value > 0:
        raise ValueError(f"LIBTUNE_HOOK_TIMEOUT_S={text!r}: give the seconds a hook of yours may take, above 0")
    return value


class Driver:
    """Serves one run of ``tune run`` (its end of the socketpair is ``engine_fd``)."""

    def __init__(self, hooks, experiment_dir):
        self.hooks = hooks
        self.dir = experiment_dir
        self.mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.engine_fd = theirs.detach()
        self.trials = {}
        self.iteration = 0
        self.failed = None  # (hook, trial, the exception)
        self.stopped_all = False
        self.resumed = False
        self.timeout = hook_timeout()
        self.lines = 0
        self._buffer = b""
        self._controller = _Controller(self)
        self._searcher_finished = False
        self._rng = random.Random()
        self._trial_objs = []  # self.trials' values, the list every callback is given (Ray's live list)
        self._running = None  # (the hook, when it began) while user code runs
        self._overrun = None
        self._hook_names = {}
        self._stoppers = [(s, _stopper_name(s)) for s in hooks.stoppers]

    # -- the loop -------------------------------------------------------------------

    def close_engine_end(self):
        if self.engine_fd is not None:
            os.close(self.engine_fd)
            self.engine_fd = None

    def serve(self, proc):
        """Answers until the engine closes its end (it ended); returns its exit code.
        Ctrl-C: the engine is told (SIGINT: every trial stops) and still answered, so
        the callbacks see the trials end; a second Ctrl-C stops answering."""
        self.close_engine_end()
        sock = self.mine
        sock.setblocking(False)
        interrupted = 0
        watching = threading.current_thread() is threading.main_thread()
        if watching:
            previous = signal.signal(signal.SIGALRM, self._alarm)
            done = threading.Event()
            watchdog = threading.Thread(target=self._watch_hooks, args=(threading.get_ident(), done),
                                        name="libtune-hook-watchdog", daemon=True)
            watchdog.start()
        try:
            while True:
                try:
                    if not self._serve_some(sock, proc):
                        break
                except KeyboardInterrupt:
                    interrupted += 1
                    if interrupted > 1:
                        raise
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
        finally:
            if watching:
                done.set()
                watchdog.join()
                signal.signal(signal.SIGALRM, previous)
            sock.close()
        code = proc.wait()
        if interrupted:
            raise KeyboardInterrupt()
        return code

    def _serve_some(self, sock, proc):
        """Handles what arrived within half a second; False once the engine's end closed."""
        try:
            ready, _, _ = select.select([sock], [], [], 0.5)
        except InterruptedError:
            return True
        if not ready:
            return proc.poll() is None
        try:
            chunk = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return True
        except ConnectionResetError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                self._handle_line(line)
        return True

    def _send(self, obj):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        sock = self.mine
        while data:
            try:
                n = sock.send(data)
                data = data[n:]
            except BlockingIOError:
                select.select([], [sock], [], 1.0)
            except (BrokenPipeError, ConnectionResetError):
                return

    def _handle_line(self, line):
        self.lines += 1
        answers = []
        try:
            message = json.loads(line)
            events = message.get("events", [])
        except ValueError:
            events = []
        if self.failed is None:
            self.iteration += 1
            self._each_callback("on_step_begin", None, iteration=self.iteration, trials=self._trial_list())
        for e in events:
            kind = e.get("e")
            if kind == "experiment_end":
                if self.failed is None:
                    self._call("Callback.on_experiment_end", None, self._each_callback_fn("on_experiment_end"),
                               trials=self._trial_list())
                    self.save_state()
                answers.append({"a": "done"})
                continue
            if self.failed is not None:
                continue  # the experiment ends; the engine answers what it asked itself
            handler = getattr(self, "_on_" + str(kind), None)
            if handler is not None:
                handler(e, answers)
        if self.failed is None:
            self._each_callback("on_step_end", None, iteration=self.iteration, trials=self._trial_list())
            self._after_batch(answers)
        if self.failed is not None and not any(a["a"] == "failure" for a in answers) and not self._failure_sent:
            answers.append(self._failure_answer())
        if any(a["a"] == "failure" for a in answers):
            self._failure_sent = True
        self._send({"ack": self.lines, "answers": answers})

    _failure_sent = False

    # -- running user code -------------------------------------------------------------

    def _call(self, hook, for_trial, fn, *args, **kwargs):
        """fn(*args, **kwargs) within the hook's time; on an exception the experiment's
        failure is kept and None returned. While serve() runs, its watchdog thread
        interrupts a hook that overruns (no timer is set per call: a result's hooks cost
        only the calls themselves)."""
        if self.failed is not None:
            return None
        self._running = (hook, time.monotonic())
        try:
            return fn(*args, **kwargs)
        except _HookTimeout:
            e = TimeoutError(f"{hook} did not return within {self.timeout:g} s (LIBTUNE_HOOK_TIMEOUT_S)")
            self.failed = (hook, for_trial, e, "".join(traceback.format_stack()[-8:]))
        except Exception as e:
            self.failed = (hook, for_trial, e, traceback.format_exc())
        finally:
            self._running = None
        return None

    def _watch_hooks(self, main_thread_id, done):
        """The watchdog: a hook running past the timeout gets SIGALRM in the main thread,
        whose handler (set by serve) raises _HookTimeout inside it."""
        period = min(0.5, self.timeout / 4)
        while not done.wait(period):
            running = self._running
            if running is not None and time.monotonic() - running[1] > self.timeout and running is self._running:
                self._overrun = running
                signal.pthread_kill(main_thread_id, signal.SIGALRM)

    def _alarm(self, signum, frame):
        running = self._running
        if running is not None and running is self._overrun:
            raise _HookTimeout()

    def _failure_answer(self):
        hook, trial, e, tb = self.failed
        return {"a": "failure", "hook": hook, "trial": trial or "", "message": f"{type(e).__name__}: {e}",
                "traceback": tb}

    def _each_callback_fn(self, name):
        def each(**kwargs):
            for c in self.hooks.callbacks:
                method = getattr(c, name, None)
                if method is not None:
                    method(**kwargs)
        return each

    def _each_callback(self, name, for_trial, **kwargs):
        for c in self.hooks.callbacks:
            method = getattr(c, name, None)
            if method is None:
                continue
            key = (id(c), name)
            hook = self._hook_names.get(key)
            if hook is None:
                hook = self._hook_names[key] = f"Callback {type(c).__name__}.{name}"
            self._call(hook, for_trial, method, **kwargs)
            if self.failed is not None:
                return

    def _trial_list(self):
        return self._trial_objs

    def _config(self, config):
        if config is None or not self.hooks.objects:
            return config
        from .search.sample import fill_objects
        return fill_objects(config, self.hooks.objects)

    def _trial(self, trial_id, config=None):
        config = self._config(config)
        t = self.trials.get(trial_id)
        if t is None:
            t = Trial(trial_id, config if config is not None else {}, self.hooks.trainable_name, self.dir)
            if self.hooks.trial_name_creator is not None:
                from .trainable import TrialInfo
                name = self._call("TuneConfig.trial_name_creator", trial_id, self.hooks.trial_name_creator,
                                  TrialInfo(trial_id, t.config, self.hooks.trainable_name, os.path.basename(self.dir)))
                if name is not None:
                    t.custom_trial_name = str(name)
            self.trials[trial_id] = t
            self._trial_objs.append(t)
        elif config is not None:
            t.config = config
        return t

    # -- the events ----------------------------------------------------------------

    def _on_setup(self, e, answers):
        ex = e.get("experiment", {})
        self.resumed = bool(ex.get("resumed"))
        for info in e.get("trials", []):
            t = self._trial(info["id"], info.get("config"))
            t.status = {"terminated": Trial.TERMINATED, "error": Trial.ERROR, "paused": Trial.PAUSED}.get(
                info.get("state"), Trial.PENDING)
            t.error_msg = info.get("error") or None
            if info.get("checkpoint", -1) >= 0:
                t._checkpoint_iteration = info["checkpoint"]
                t._checkpoint_dir = os.path.join(self.dir, "checkpoints", t.trial_id, str(info["checkpoint"]))
        if self.resumed:
            self.restore_state()
        h = self.hooks
        for s in (h.searcher, h.scheduler):
            if s is None or not hasattr(s, "set_search_properties"):
                continue
            name = type(s).__name__
            if s is h.searcher:
                self._call(f"{name}.set_search_properties", None, s.set_search_properties, h.metric, h.mode, h.space)
            else:
                self._call(f"{name}.set_search_properties", None, s.set_search_properties, h.metric, h.mode)
        num = ex.get("num_samples") or None
        self._each_callback("setup", None, stop=h.stop, num_samples=num, total_num_samples=num)

    def _on_suggest(self, e, answers):
        trial_id = e["trial"]
        s = self.hooks.searcher
        if s is None or self._searcher_finished:
            answers.append({"a": "suggestion", "trial": trial_id, "finished": True})
            return
        name = type(s).__name__
        cfg = self._call(f"{name}.suggest", trial_id, s.suggest, trial_id)
        if self.failed is not None:
            return
        from .search.searcher import Searcher
        if cfg == Searcher.FINISHED or (isinstance(cfg, str) and cfg == "FINISHED"):
            self._searcher_finished = True
            answers.append({"a": "suggestion", "trial": trial_id, "finished": True})
        elif cfg is None:
            answers.append({"a": "suggestion", "trial": trial_id})  # not now: asked again
        elif not isinstance(cfg, dict):
            self.failed = (f"{name}.suggest", trial_id,
                           TypeError(f"{name}.suggest({trial_id!r}) returned {type(cfg).__name__}: return a config "
                                     f"(a dict), None (not now) or Searcher.FINISHED"), "")
        else:
            try:
                cfg = _jsonable(cfg, f"{name}.suggest({trial_id!r})")
            except ValueError as err:
                self.failed = (f"{name}.suggest", trial_id, err, "")
                return
            answers.append({"a": "suggestion", "trial": trial_id, "config": cfg})

    def _on_prepare(self, e, answers):
        trial_id, cfg = e["trial"], e.get("config", {})
        h = self.hooks
        out = {"a": "prepared", "trial": trial_id}
        if h.sample_from:
            cfg = self._call("sample_from", trial_id, resolve_sample_from, cfg, h.sample_from)
            if self.failed is not None:
                return
        out["config"] = cfg
        if h.resources_fn is not None:
            from .trainable import resources_to_json, PlacementGroupFactory
            name = getattr(h.resources_fn, "__name__", "the resources function")
            got = self._call(f"with_resources({name})", trial_id, h.resources_fn, cfg)
            if self.failed is not None:
                return
            try:
                if isinstance(got, PlacementGroupFactory):
                    out["resources"] = {"bundles": got.bundles, "strategy": got.strategy.lower()}
                elif isinstance(got, dict):
                    out["resources"] = resources_to_json(got, f"with_resources({name})({trial_id})")
                elif got is not None:
                    raise TypeError(f"with_resources({name}) returned {type(got).__name__} for {trial_id}: return a "
                                    f"dict such as {{'cpu': 2, 'gpu': 0.5}} or a PlacementGroupFactory")
            except (TypeError, ValueError) as err:
                out["error"] = str(err)
        answers.append(out)

    def _on_explore(self, e, answers):
        trial_id, cfg = e["trial"], e.get("config", {})
        for pointer in e.get("resample", []):
            draw = self.hooks.mutations.get(pointer)
            if draw is None:
                continue
            value = self._call(f"PopulationBasedTraining's hyperparam_mutations[{pointer!r}]", trial_id,
                               _draw, draw, self._rng)
            if self.failed is not None:
                return
            try:
                path = tuple(pointer[1:].split("/")) if pointer.startswith("/") else (pointer,)
                _set(cfg, path, _jsonable(value, f"hyperparam_mutations[{pointer!r}]"))
            except ValueError as err:
                self.failed = ("PopulationBasedTraining", trial_id, err, "")
                return
        fn = self.hooks.explore_fn
        if fn is not None:
            new = self._call("PopulationBasedTraining's custom_explore_fn", trial_id, fn, cfg)
            if self.failed is not None:
                return
            if not isinstance(new, dict):
                self.failed = ("PopulationBasedTraining's custom_explore_fn", trial_id,
                               TypeError(f"custom_explore_fn returned {type(new).__name__}: return the config"), "")
                return
            try:
                cfg = _jsonable(new, "custom_explore_fn's config")
            except ValueError as err:
                self.failed = ("PopulationBasedTraining's custom_explore_fn", trial_id, err, "")
                return
        answers.append({"a": "explored", "trial": trial_id, "config": cfg})

    def _on_start(self, e, answers):
        t = self._trial(e["trial"], e.get("config"))
        first = t.started == 0 and not self.resumed
        t.status = Trial.RUNNING
        now = time.time()
        t.restarted = now
        if t.started == 0:
            t.started = now
        s = self.hooks.scheduler
        if s is not None and first and hasattr(s, "on_trial_add"):
            self._call(f"{type(s).__name__}.on_trial_add", t.trial_id, s.on_trial_add, self._controller, t)
        if first and self.hooks.dirname_creator is not None:
            self._link_dir(t)
        restored = e.get("restored_from", -1) is not None and e.get("restored_from", -1) >= 0
        self._each_callback("on_trial_restore" if restored else "on_trial_start", t.trial_id,
                            iteration=self.iteration, trials=self._trial_list(), trial=t)

    def _link_dir(self, t):
        """TuneConfig's trial_dirname_creator: the trial's folder (trials/<id>) also under
        the name it gives, as a link in the experiment folder."""
        name = self._call("TuneConfig.trial_dirname_creator", t.trial_id, self.hooks.dirname_creator, t)
        if self.failed is not None or name is None:
            return
        name = str(name)
        if not name or "/" in name or name in (".", "..") or name in ("trials", "checkpoints", "tuner"):
            self.failed = ("TuneConfig.trial_dirname_creator", t.trial_id,
                           ValueError(f"trial_dirname_creator returned {name!r} for {t.trial_id}: return a folder name "
                                      f"(no '/'; not trials, checkpoints or tuner)"), "")
            return
        link = os.path.join(self.dir, name)
        try:
            os.symlink(os.path.join("trials", t.trial_id), link)
        except FileExistsError:
            sys.stderr.write(f"libtune: trial_dirname_creator gave {t.trial_id} the name {name!r}, which another "
                             f"trial or file has: it stays trials/{t.trial_id} only\n")
        except OSError as err:
            sys.stderr.write(f"libtune: {link} cannot be made ({err}): {t.trial_id} stays trials/{t.trial_id}\n")

    def _result_of(self, t, e):
        result = dict(e.get("metrics") or {})
        result.setdefault("training_iteration", e.get("iteration", 0))
        now = e.get("time") or time.time()
        result.setdefault("trial_id", t.trial_id)
        result.setdefault("timestamp", int(now))
        result.setdefault("time_total_s", max(0.0, now - (t.started or now)))
        result.setdefault("done", False)
        result["config"] = t.config
        return result

    def _on_result(self, e, answers):
        t = self._trial(e["trial"])
        result = self._result_of(t, e)
        h = self.hooks
        decision = None
        for s, name in self._stoppers:
            if self._call(name, t.trial_id, s, t.trial_id, result):
                decision = "stop"
                break
        if self.failed is not None:
            return
        if decision is None and h.scheduler is not None:
            name = type(h.scheduler).__name__
            got = self._call(f"{name}.on_trial_result", t.trial_id, h.scheduler.on_trial_result, self._controller, t,
                             result)
            if self.failed is not None:
                return
            if got in ("STOP", "PAUSE"):
                decision = got.lower()
        if decision != "stop" and h.searcher is not None and hasattr(h.searcher, "on_trial_result"):
            self._call(f"{type(h.searcher).__name__}.on_trial_result", t.trial_id, h.searcher.on_trial_result,
                       t.trial_id, result)
        if decision == "stop":
            result["done"] = True
        self._each_callback("on_trial_result", t.trial_id, iteration=self.iteration, trials=self._trial_list(),
                            trial=t, result=result)
        if self.failed is not None:
            return
        t.last_result = result
        if decision:
            answers.append({"a": decision, "trial": t.trial_id, "reason": _reason(decision, h, t)})
        if result.get(SHOULD_CHECKPOINT) and decision != "stop":
            answers.append({"a": "checkpoint", "trial": t.trial_id, "reason": "a callback set should_checkpoint"})

    def _on_checkpoint(self, e, answers):
        t = self._trial(e["trial"])
        t._checkpoint_iteration = e.get("iteration", -1)
        t._checkpoint_dir = e.get("dir")
        self._each_callback("on_trial_save", t.trial_id, iteration=self.iteration, trials=self._trial_list(), trial=t)
        if self.failed is None:
            self._each_callback("on_checkpoint", t.trial_id, iteration=self.iteration, trials=self._trial_list(),
                                trial=t, checkpoint=t.checkpoint)

    def _on_end(self, e, answers):
        t = self._trial(e["trial"])
        state, recovering = e.get("state"), e.get("recovering", False)
        h = self.hooks
        common = dict(iteration=self.iteration, trials=self._trial_list(), trial=t)
        if recovering:
            t.num_failures += 1
            t.status = Trial.PENDING
            self._each_callback("on_trial_recover", t.trial_id, **common)
            return
        if state == "paused":
            t.status = Trial.PAUSED
            return
        failed = state == "error"
        t.status = Trial.ERROR if failed else Trial.TERMINATED
        t.error_msg = e.get("error") or None
        if h.searcher is not None and hasattr(h.searcher, "on_trial_complete"):
            self._call(f"{type(h.searcher).__name__}.on_trial_complete", t.trial_id, h.searcher.on_trial_complete,
                       t.trial_id, result=t.last_result or None, error=failed)
        s = h.scheduler
        if s is not None:
            name = "on_trial_error" if failed else "on_trial_complete"
            method = getattr(s, name, None)
            if method is not None:
                if failed:
                    self._call(f"{type(s).__name__}.{name}", t.trial_id, method, self._controller, t)
                else:
                    self._call(f"{type(s).__name__}.{name}", t.trial_id, method, self._controller, t, t.last_result)
        self._each_callback("on_trial_error" if failed else "on_trial_complete", t.trial_id, **common)

    def _on_save(self, e, answers):
        self.save_state()

    def _after_batch(self, answers):
        if not self.stopped_all:
            for s in self.hooks.stoppers:
                if _is_function(s) or not hasattr(s, "stop_all"):
                    continue
                if self._call(f"Stopper {type(s).__name__}.stop_all", None, s.stop_all):
                    self.stopped_all = True
                    answers.append({"a": "stop_all", "reason": f"{type(s).__name__}.stop_all() returned True"})
                    break
        s = self.hooks.scheduler
        if s is not None and hasattr(s, "choose_trial_to_run") and self.failed is None:
            if any(t.status == Trial.PAUSED for t in self.trials.values()):
                chosen = self._call(f"{type(s).__name__}.choose_trial_to_run", None, s.choose_trial_to_run,
                                    self._controller)
                if isinstance(chosen, Trial) and chosen.status == Trial.PAUSED:
                    chosen.status = Trial.PENDING
                    answers.append({"a": "resume", "trial": chosen.trial_id})

    # -- the hooks' state, for Tuner.restore ----------------------------------------

    def save_state(self):
        try:
            import cloudpickle
        except ImportError:
            return
        state = {"searcher": self.hooks.searcher, "scheduler": self.hooks.scheduler,
                 "callbacks": [c.get_state() if hasattr(c, "get_state") else None for c in self.hooks.callbacks]}
        path = os.path.join(self.dir, "tuner", _STATE_FILE)
        try:
            data = cloudpickle.dumps(state)
        except Exception as e:  # said, not fatal: the experiment goes on, restore starts them afresh
            if not getattr(self, "_said_unpicklable", False):
                self._said_unpicklable = True
                sys.stderr.write(f"libtune: the searcher, scheduler or callbacks' state cannot be pickled "
                                 f"({type(e).__name__}: {e}): Tuner.restore would start them afresh\n")
            return
        temp = path + ".tmp"
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)

    def restore_state(self):
        path = os.path.join(self.dir, "tuner", _STATE_FILE)
        if not os.path.exists(path):
            return
        try:
            with open(path, "rb") as f:
                state = pickle.load(f)
        except Exception as e:
            sys.stderr.write(f"libtune: {path} cannot be read ({type(e).__name__}: {e}): the searcher and the "
                             f"callbacks start afresh\n")
            return
        if state.get("searcher") is not None and self.hooks.searcher is not None and \
                type(state["searcher"]).__name__ == type(self.hooks.searcher).__name__:
            self.hooks.searcher = state["searcher"]
        if state.get("scheduler") is not None and self.hooks.scheduler is not None and \
                type(state["scheduler"]).__name__ == type(self.hooks.scheduler).__name__:
            self.hooks.scheduler = state["scheduler"]
        for c, s in zip(self.hooks.callbacks, state.get("callbacks", [])):
            if s is not None and hasattr(c, "set_state"):
                self._call(f"Callback {type(c).__name__}.set_state", None, c.set_state, s)

    def raise_failure(self):
        if self.failed is None:
            return
        hook, trial, e, tb = self.failed
        where = f"{hook}" + (f" (for {trial})" if trial else "")
        if hasattr(e, "add_note"):
            e.add_note(f"libtune: raised by {where}; every trial was stopped. Fix it and continue the experiment "
                       f"with Tuner.restore({self.dir!r}, trainable).fit()")
            raise e
        raise HookError(f"{where} raised {type(e).__name__}: {e}") from e


def _is_function(s):
    from .stopper import Stopper
    return not isinstance(s, Stopper)


def _stopper_name(s):
    return "Stopper " + (getattr(s, "__name__", "stop") if _is_function(s) else type(s).__name__)


def _reason(decision, hooks, t):
    if decision == "stop" and hooks.stoppers:
        return "a stopper of the user's"
    return f"{type(hooks.scheduler).__name__}.on_trial_result" if hooks.scheduler is not None else decision


def _draw(draw, rng):
    """A new value from a PBT mutation the engine cannot draw: a function (called with
    no arguments, as Ray calls it), a domain (sampled), or a list (one of it)."""
    from .search.sample import Domain
    if isinstance(draw, Domain):
        return draw.sample()
    if isinstance(draw, (list, tuple)):
        return rng.choice(list(draw))
    return draw()
