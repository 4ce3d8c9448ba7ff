"""libtune: the trial side of libtune for Python training scripts.

A libtune node starts a trial's process with its configuration and cards in the
environment and a pipe on which the trial reports (docs/trials.md). This module reads
that environment and writes the reports, standard library only::

    import libtune
    cfg = libtune.config()                      # {"lr": 0.05, ...}
    for epoch in range(cfg.get("epochs", 10)):
        if libtune.should_stop():               # the node asked the trial to stop
            break
        loss, acc = train_one_epoch(cfg)
        libtune.report(val_acc=acc, loss=loss)  # one result; iterations count from 1

Contracts that hold for the whole module:
- ``import libtune`` never fails and has one side effect only: inside a trial
  (``TUNE_TRIAL_ID`` set), imported in the main thread, with SIGTERM at its default
  action, it installs the SIGTERM handler behind ``should_stop()``.
- The environment is read on first use; a malformed variable raises ``ValueError``
  naming it, from the first function that needs it (and from each later call).
- Each report is one JSON object on one line, written whole and never interleaved with
  another thread's line. A node that is gone raises ``ReportError``.
- Outside a trial (no ``TUNE_TRIAL_ID``) the script still runs: ``config()`` is ``{}``,
  ``report()`` prints to stderr, checkpoints raise ``RuntimeError``.
"""

# Only modules that cost little to import: a trial's start-up is its interpreter's plus
# this (json is the one import of note, and config() needs it). No dataclasses, copy,
# threading or select: they would double the time `import libtune` takes.
import _thread
import json
import math
import operator
import os
import signal
import sys

__version__ = "0.1.0"

__all__ = [
    "Gpu", "ReportError", "checkpoint_dir", "config", "device_ids", "done", "gpus",
    "in_trial", "limit_torch_memory", "node_id", "report", "report_checkpoint",
    "restore_dir", "restore_iteration", "should_stop", "trial_dir", "trial_id",
]


class ReportError(RuntimeError):
    """A report could not be written to the node (it is gone, or the fd is unusable)."""


class Gpu(tuple):
    """One card the trial holds, an immutable record (a named tuple). ``local`` is CUDA's
    device number inside the trial (0..k-1, the only valid ``device_ids``); ``index``,
    ``uuid`` and ``pci_bus_id`` name the physical card; ``memory_quota`` is in bytes; a
    ``logical`` card is one the node declared without a real device behind it (CUDA
    does not see it). ``_asdict()`` gives it as a dict."""

    __slots__ = ()
    _fields = ("local", "index", "uuid", "pci_bus_id", "share", "memory_quota", "logical")

    def __new__(cls, local, index, uuid, pci_bus_id, share, memory_quota, logical):
        return tuple.__new__(cls, (local, index, uuid, pci_bus_id, share, memory_quota, logical))

    local = property(lambda self: self[0])
    index = property(lambda self: self[1])
    uuid = property(lambda self: self[2])
    pci_bus_id = property(lambda self: self[3])
    share = property(lambda self: self[4])
    memory_quota = property(lambda self: self[5])
    logical = property(lambda self: self[6])

    def _asdict(self):
        return dict(zip(self._fields, self))

    def __repr__(self):
        return "Gpu(" + ", ".join("%s=%r" % kv for kv in zip(self._fields, self)) + ")"


# ---------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------

def in_trial():
    """True when this process was started by a libtune node (``TUNE_TRIAL_ID`` set)."""
    return bool(os.environ.get("TUNE_TRIAL_ID"))


def trial_id():
    """The trial's id (e.g. "trial-00003"); "" outside a trial."""
    return os.environ.get("TUNE_TRIAL_ID", "")


def node_id():
    """The id of the node running the trial; "" outside a trial."""
    return os.environ.get("TUNE_NODE_ID", "") if in_trial() else ""


def trial_dir():
    """The trial's own folder (absolute; checkpoints go under it); "" outside a trial."""
    return os.environ.get("TUNE_TRIAL_DIR", "") if in_trial() else ""


_parse_lock = _thread.allocate_lock()
_config = None  # the TUNE_TRIAL_CONFIG text, once it parsed as an object
_gpus = None    # the parsed TUNE_TRIAL_GPUS, once valid


def _json_env(name, fallback):
    text = os.environ.get(name, "").strip() or fallback
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError("%s is not valid JSON (%s): %.200r; the node sets it, so this "
                         "process was not started by a node as expected" % (name, e, text)) from None


def config():
    """The trial's configuration: a dict (possibly nested), a fresh copy on each call
    so callers may change it freely. ``{}`` outside a trial and when the node gave none.
    Raises ValueError naming TUNE_TRIAL_CONFIG when it is not a JSON object."""
    global _config
    if not in_trial():
        return {}
    with _parse_lock:
        if _config is None:
            value = _json_env("TUNE_TRIAL_CONFIG", "{}")
            if not isinstance(value, dict):
                raise ValueError("TUNE_TRIAL_CONFIG must be a JSON object, not %s: %.200r"
                                 % (type(value).__name__, os.environ.get("TUNE_TRIAL_CONFIG")))
            _config = os.environ.get("TUNE_TRIAL_CONFIG", "").strip() or "{}"
            return value
        return json.loads(_config)  # a fresh copy: parsed again


def _field(entry, position, key, kind, default):
    value = entry.get(key, default)
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool),
          "str": isinstance(value, str),
          "bool": isinstance(value, bool)}[kind]
    if not ok:
        raise ValueError("TUNE_TRIAL_GPUS entry %d: %r must be %s, not %r"
                         % (position, key, {"int": "an integer", "number": "a number",
                                            "str": "a string", "bool": "true or false"}[kind], value))
    return value


def gpus():
    """The cards this trial holds, as a list of ``Gpu`` in CUDA's numbering inside the
    trial; ``[]`` outside a trial or without cards. Raises ValueError naming
    TUNE_TRIAL_GPUS when it is not a JSON list of card objects (each with a "uuid")."""
    global _gpus
    if not in_trial():
        return []
    with _parse_lock:
        if _gpus is None:
            value = _json_env("TUNE_TRIAL_GPUS", "[]")
            if not isinstance(value, list):
                raise ValueError("TUNE_TRIAL_GPUS must be a JSON list of cards, not %s: %.200r"
                                 % (type(value).__name__, os.environ.get("TUNE_TRIAL_GPUS")))
            cards = []
            for i, e in enumerate(value):
                if not isinstance(e, dict):
                    raise ValueError("TUNE_TRIAL_GPUS entry %d must be a JSON object, not %r" % (i, e))
                if "uuid" not in e:
                    raise ValueError("TUNE_TRIAL_GPUS entry %d has no \"uuid\": %r" % (i, e))
                local = _field(e, i, "local", "int", i)
                cards.append(Gpu(local=local,
                                 index=_field(e, i, "index", "int", local),
                                 uuid=_field(e, i, "uuid", "str", ""),
                                 pci_bus_id=_field(e, i, "pci_bus_id", "str", ""),
                                 share=float(_field(e, i, "share", "number", 1.0)),
                                 memory_quota=_field(e, i, "memory_quota", "int", 0),
                                 logical=_field(e, i, "logical", "bool", False)))
            _gpus = cards
        return list(_gpus)


def device_ids():
    """``[g.local for g in gpus()]``: the CUDA device numbers of the trial's cards
    (0..k-1), the only valid ``device_ids`` for ``torch.nn.DataParallel``. Logical
    cards are listed too, but CUDA has no device for them."""
    return [g.local for g in gpus()]


def get_gpu_ids():
    """Ray's ``ray.get_gpu_ids()``: the trial's cards as CUDA numbers them inside the trial
    (``device_ids()``, 0..k-1). Ray returns the machine's numbers, which are not valid
    device numbers inside a trial that sees only its own cards; the machine's index and
    the UUID of each card are in ``gpus()``."""
    return device_ids()


def init(address=None, **kwargs):
    """Ray's ``ray.init``: which cluster the driver API's fit() runs on (the one on this
    machine or an embedded one by default; ``address="HOST:PORT"``, ``num_cpus=``,
    ``num_gpus=``). See libtune._cluster."""
    from . import _cluster
    return _cluster.init(address, **kwargs)


def shutdown():
    """Ray's ``ray.shutdown``: forgets init()'s choice."""
    from . import _cluster
    _cluster.shutdown()


def is_initialized():
    from . import _cluster
    return _cluster.is_initialized()


def __getattr__(name):
    # ``import libtune as ray; ray.tune.Tuner``: the driver API's modules on first use
    # (never imported by a trial that does not use them).
    if name in ("tune", "train"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'libtune' has no attribute %r" % name)


def restore_dir():
    """The checkpoint folder this trial starts from (``TUNE_RESTORE_DIR``), or None when
    it starts afresh or runs outside a trial."""
    return (os.environ.get("TUNE_RESTORE_DIR") or None) if in_trial() else None


def restore_iteration():
    """The iteration of the checkpoint this trial starts from: the last path component
    of ``restore_dir()`` when it is a whole number (".../checkpoints/7" -> 7), else None."""
    d = restore_dir()
    if d is None:
        return None
    last = os.path.basename(os.path.normpath(d))
    return int(last) if last.isascii() and last.isdigit() else None


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------

_write_lock = _thread.allocate_lock()  # one line at a time, and the iteration counter with it
_last_iteration = None          # the iteration of the last result; None before the first

# Stop state, shared with the SIGTERM handler. Plain module globals: the handler runs in
# the main thread between bytecodes and must never wait on a lock.
_stop_requested = False  # SIGTERM came
_stop_aware = False      # the script asked should_stop() (or got False from report())
_exit_raised = False     # SystemExit(143) has been raised once; never again
_exit_pending = False    # SIGTERM came while the main thread was writing a line
_main_writing = False    # the main thread is inside a line's write


def _report_fd():
    text = os.environ.get("TUNE_REPORT_FD", "").strip()
    if not text:
        raise ReportError("cannot report to the libtune node: TUNE_REPORT_FD is not set, so this "
                          "trial has no report channel (trials are started by a node)")
    try:
        fd = int(text)
    except ValueError:
        fd = -1
    if fd < 0:
        raise ValueError("TUNE_REPORT_FD must be a file descriptor number (like 3), not %r" % text)
    return fd


def _write_all(data):
    """Writes every byte of ``data`` on the report fd. Caller holds _write_lock."""
    fd = _report_fd()
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:  # a non-blocking fd: wait until it takes more
            import select
            select.select([], [fd], [])
            continue
        except BrokenPipeError as e:
            raise ReportError("cannot report to the libtune node: its end of the report pipe "
                              "(fd %d) is closed, so the node is gone" % fd) from e
        except OSError as e:
            raise ReportError("cannot report to the libtune node: writing to fd %d "
                              "(TUNE_REPORT_FD) failed: %s" % (fd, e)) from e
        view = view[n:]


class _Writing:
    """``with _Writing():`` holds the line lock; a stop exit that SIGTERM asked for while
    the main thread was inside is raised on leaving, so a line is never cut short."""

    # The order matters: the flag goes up before the lock is taken and down after it is
    # released, so the handler never raises while this thread holds the lock.
    def __enter__(self):
        global _main_writing
        self.main = _main_ident is not None and _thread.get_ident() == _main_ident
        if self.main:
            _main_writing = True
        _write_lock.acquire()
        return self

    def __exit__(self, *exc):
        global _main_writing, _exit_pending
        _write_lock.release()
        if self.main:
            _main_writing = False
        if self.main and _exit_pending:
            _exit_pending = False
            _exit_now()
        return False


def _line(obj):
    # A str may hold lone surrogates (a name read with os.fsdecode, "\udcff"): UTF-8
    # has no bytes for them; each becomes "?" rather than an error in report().
    return (json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8", "replace")


def _metric_value(name, value):
    """A metric as a JSON number: int stays int, anything else float()-able becomes a float."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        raise TypeError("metric %r is a boolean (%r): report a number, e.g. int(%s)" % (name, value, name))
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(type(value), "__float__"):
        raise TypeError("metric %r must be a number, not %s (%.80r)" % (name, type(value).__name__, value))
    if hasattr(type(value), "__index__"):  # numpy and torch integers stay exact
        try:
            return operator.index(value)
        except TypeError:  # e.g. a float tensor, which has __index__ but refuses it
            pass
    try:
        number = float(value)
    except (TypeError, ValueError) as e:
        raise TypeError("metric %r must be a single number, not %s: float() says %s"
                        % (name, type(value).__name__, e)) from None
    if not math.isfinite(number):
        # JSON has no NaN: sent as text ("nan", "inf", "-inf"), so that a diverged run's
        # other metrics still count; the experiment ends a trial whose *tuned* metric is
        # not a finite number, saying so.
        return "nan" if number != number else ("inf" if number > 0 else "-inf")
    return number


def _check_iteration(iteration, least):
    if isinstance(iteration, bool) or not hasattr(type(iteration), "__index__"):
        raise TypeError("iteration must be an integer, not %s (%.80r)" % (type(iteration).__name__, iteration))
    iteration = operator.index(iteration)
    if iteration < least:
        raise ValueError("iteration must be >= %d, not %d" % (least, iteration))
    return iteration


def _next_iteration():
    """The iteration the next automatic result gets: the last result's plus one, or the
    restored checkpoint's plus one, or 1."""
    last = _last_iteration
    return (last if last is not None else (restore_iteration() or 0)) + 1


def report(metrics=None, *, iteration=None, **kw):
    """Reports one result: ``metrics`` (a dict of name -> number) merged with keyword
    metrics, as ``{"type": "result", "iteration": N, "metrics": {...}}``.

    - Values: int, float, or any non-str/bytes object with ``__float__`` (numpy scalars,
      0-dim tensors). bool raises TypeError; another type raises TypeError naming the
      metric; NaN and infinities are sent as the texts "nan", "inf" and "-inf" (JSON has
      no NaN): the trial goes on, and the experiment ends it in error only when its tuned
      metric is not a finite number. Names are non-empty strings,
      each given once (a name in both the dict and the keywords is a ValueError). No
      metrics at all is a ValueError. Nothing is written when any of this fails.
    - ``iteration``: by default the previous result's plus one, starting at 1, or after
      ``restore_iteration()`` when the trial starts from a checkpoint. ``iteration=N``
      (an int >= 1) sets this one; the next automatic one is N + 1.
    - Returns True while the trial should go on, False once the node asked it to stop
      (the result is still written). Raises ReportError when the node is gone.
    - Outside a trial it prints the line to stderr and returns True.
    """
    global _last_iteration, _stop_aware
    merged = {}
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise TypeError("metrics must be a dict of name -> number, not %s" % type(metrics).__name__)
        merged.update(metrics)
    for name, value in kw.items():
        if name in merged:
            raise ValueError("metric %r is given twice (in the dict and as a keyword)" % name)
        merged[name] = value
    if not merged:
        raise ValueError("report() needs at least one metric, e.g. report(loss=0.3)")
    values = {}
    for name, value in merged.items():
        if not isinstance(name, str) or not name:
            raise TypeError("metric names must be non-empty strings, not %r" % (name,))
        values[name] = _metric_value(name, value)
    if iteration is not None:
        iteration = _check_iteration(iteration, 1)

    with _Writing():
        if iteration is None:
            iteration = _next_iteration()
        data = _line({"type": "result", "iteration": iteration, "metrics": values})
        if in_trial():
            _write_all(data)
        else:
            sys.stderr.write("libtune: report (not running as a trial): " + data.decode("utf-8"))
            sys.stderr.flush()
        _last_iteration = iteration
    if _stop_requested:
        _stop_aware = True
        return False
    return True


def checkpoint_dir(iteration):
    """Creates (if needed) and returns ``<trial_dir()>/checkpoints/<iteration>`` for an
    int iteration >= 0. Write the checkpoint's files there, then ``report_checkpoint``.
    Raises RuntimeError outside a trial: checkpoints need a trial folder."""
    iteration = _check_iteration(iteration, 0)
    base = trial_dir()
    if not base:
        raise RuntimeError("checkpoints need a trial: %s, so there is no trial folder "
                           "to keep them in" % ("TUNE_TRIAL_DIR is not set" if in_trial()
                                                 else "not running as a libtune trial"))
    path = os.path.join(base, "checkpoints", str(iteration))
    os.makedirs(path, exist_ok=True)
    return path


def report_checkpoint(iteration):
    """Tells the node that the checkpoint of ``iteration`` is complete:
    ``{"type": "checkpoint", "iteration": N, "dir": "checkpoints/N"}`` (dir relative to
    the trial folder). Its folder must exist: FileNotFoundError otherwise. Raises
    RuntimeError outside a trial and ReportError when the node is gone."""
    iteration = _check_iteration(iteration, 0)
    if not trial_dir():
        checkpoint_dir(iteration)  # raises the RuntimeError that says why
    relative = "checkpoints/%d" % iteration
    path = os.path.join(trial_dir(), relative)
    if not os.path.isdir(path):
        raise FileNotFoundError("no checkpoint folder %s: create it with libtune.checkpoint_dir(%d), "
                                "write the checkpoint's files there, then report it" % (path, iteration))
    with _Writing():
        _write_all(_line({"type": "checkpoint", "iteration": iteration, "dir": relative}))


def done(message=""):
    """Says the trial is done with its work (optional final message), as
    ``{"type": "done", "message": "..."}``. Outside a trial it prints to stderr."""
    if not isinstance(message, str):
        raise TypeError("done() takes a message string, not %s" % type(message).__name__)
    with _Writing():
        data = _line({"type": "done", "message": message})
        if in_trial():
            _write_all(data)
        else:
            sys.stderr.write("libtune: done (not running as a trial): " + data.decode("utf-8"))
            sys.stderr.flush()


# ---------------------------------------------------------------------------------------
# Stopping: the node sends SIGTERM to the trial's process group, SIGKILL after a grace
# period. A script that asks should_stop() is stop-aware and ends on its own; any other
# script gets SystemExit(143) from the handler, so its finally blocks and atexit run
# instead of it being killed at the end of the grace period.
# ---------------------------------------------------------------------------------------

def should_stop():
    """True once the node asked the trial to stop (SIGTERM). Calling it makes the script
    stop-aware: from then on SIGTERM only sets this flag and the script must end itself
    (finish the step, report, return) within the node's grace period."""
    global _stop_aware
    _stop_aware = True
    return _stop_requested


def _exit_now():
    global _exit_raised
    _exit_raised = True
    raise SystemExit(128 + signal.SIGTERM)


def _on_sigterm(signum, frame):
    global _stop_requested, _exit_pending
    _stop_requested = True
    if _stop_aware or _exit_raised or _exit_pending:
        return
    if _main_writing:  # finish the line first: _Writing raises on leaving
        _exit_pending = True
        return
    _exit_now()


_main_ident = None  # the main thread's, once the handler is installed (only it may be)


def _next_trial():
    """A reused worker starts the experiment's next trial in this process (docs/trials.md,
    "Reused workers"; called by the warm spawner, not by scripts): what this module kept
    of the last trial goes (its parsed configuration and cards, its last iteration, its
    stop request), as in a fresh process. The SIGTERM handler stays."""
    global _config, _gpus, _last_iteration
    global _stop_requested, _stop_aware, _exit_raised, _exit_pending
    with _parse_lock:
        _config = None
        _gpus = None
    with _write_lock:
        _last_iteration = None
    _stop_requested = _stop_aware = _exit_raised = _exit_pending = False


def _install_stop_handler():
    global _main_ident
    if not in_trial():
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)  # ValueError outside the main thread
            _main_ident = _thread.get_ident()
    except (ValueError, OSError):  # not the main thread or interpreter, or no signals here
        pass


_install_stop_handler()


# ---------------------------------------------------------------------------------------
# PyTorch (opt-in)
# ---------------------------------------------------------------------------------------

def limit_torch_memory(headroom_bytes=1 << 30):
    """Caps PyTorch's caching allocator on each of the trial's cards below its memory
    quota, so an over-allocating trial gets torch's out-of-memory error (which it can
    catch) instead of being killed by the node's GPU audit. For each card CUDA sees,
    local device i, with a quota: ``torch.cuda.set_per_process_memory_fraction(
    max(0, quota - headroom_bytes) / total_memory_of_i, i)`` (at most 1.0).

    The audit counts all of the trial's memory on a card, the CUDA context included
    (about 0.5-1 GiB per process), which torch's cap does not: hence the headroom.
    Returns the fraction for each local device in order (1.0 where the card has no
    quota, which is left uncapped); ``[]`` without CUDA or without cards. Imports torch
    only here: ImportError when it is not installed."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("libtune.limit_torch_memory() needs PyTorch, which cannot be imported "
                          "(%s): install torch, or do not call it" % e) from e
    if isinstance(headroom_bytes, bool) or not isinstance(headroom_bytes, int) or headroom_bytes < 0:
        raise ValueError("headroom_bytes must be an int >= 0, not %r" % (headroom_bytes,))
    cards = [g for g in gpus() if not g.logical]
    if not cards or not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    fractions = []
    for g in sorted(cards, key=lambda g: g.local):
        if g.local >= count:
            continue
        if g.memory_quota <= 0:
            fractions.append(1.0)
            continue
        total = torch.cuda.get_device_properties(g.local).total_memory
        fraction = min(1.0, max(0.0, g.memory_quota - headroom_bytes) / total)
        torch.cuda.set_per_process_memory_fraction(fraction, g.local)
        fractions.append(fraction)
    return fractions
