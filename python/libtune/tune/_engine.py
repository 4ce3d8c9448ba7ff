"""Runs libtune's engine (``tune run FILE``) for the driver API: on the cluster that
``libtune.init`` named (or the one running on this machine, else an embedded one), with
its progress on standard error, and its last standard-output line (one JSON object)
read back. Ctrl-C stops every trial (the engine gets it too) and leaves a resumable
experiment."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading

from .._engine_path import tune_binary
from .result_grid import open_store


class TuneError(RuntimeError):
    """libtune's engine refused the experiment or could not run it (the message is its
    own, naming what to change)."""


_LOCATION = re.compile(r"^tune run: [^:\n]*experiment\.json:\d+:\d+: ")


def _headline(tail):
    lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.startswith("tune run: ")]
    if not lines:
        return tail.decode("utf-8", "replace").strip()[-2000:] or "no output"
    return _LOCATION.sub("", lines[-1]).removeprefix("tune run: ")


def _first_error(experiment_dir):
    """(trial, error) of a trial in error in the experiment's store, or None (also while
    there is no store yet)."""
    try:
        db = open_store(experiment_dir, timeout=1)
    except FileNotFoundError:
        return None
    try:
        return db.execute("SELECT id, error FROM trials WHERE state = 'error' ORDER BY updated LIMIT 1").fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()


# What a quiet run (verbose=0) still shows of the engine's standard error: the trials'
# forwarded lines ("(trial-00001 pid=N) ...") and warnings.
_SHOWN_QUIET = re.compile(rb"^(\([^ ()]+ pid=\d+\) |tune: warning: )")


def run(file, resume=False, quiet=False, fail_fast=False, env=None, driver=None):
    """Runs ``tune run FILE`` (the experiment folder's tuner/experiment.json) and returns
    its JSON summary (None when fail_fast ended it); raises TuneError when the engine
    refused the experiment (or, with fail_fast="raise", when a trial failed),
    KeyboardInterrupt after Ctrl-C (once every trial has stopped)."""
    from .. import _cluster
    experiment_dir = os.path.dirname(os.path.dirname(os.path.abspath(file)))
    argv = [tune_binary(), "run", file] + _cluster.flags()
    env = dict(os.environ, **(env or {}))  # and the trackers' secrets (never written to a file)
    env.pop("TUNE_RESUME_DIR", None)
    if resume:
        env["TUNE_RESUME_DIR"] = experiment_dir
    fds = ()
    if driver is not None:  # the user's hooks: the engine asks, this process answers (_driver.py)
        argv += ["--driver-fd", str(driver.engine_fd)]
        fds = (driver.engine_fd,)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, pass_fds=fds)
    finally:
        if driver is not None:
            driver.close_engine_end()
    tail = bytearray()
    out = bytearray()

    partial = bytearray()

    def forward():
        err = sys.stderr
        while True:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                return
            tail.extend(chunk)
            del tail[:-16384]
            if quiet:  # verbose=0: no progress, but the trials' own lines and warnings (as Ray)
                partial.extend(chunk)
                *lines, rest = bytes(partial).split(b"\n")
                partial[:] = rest[-65536:]
                chunk = b"".join(line + b"\n" for line in lines if _SHOWN_QUIET.match(line))
                if not chunk:
                    continue
            try:
                err.buffer.write(chunk) if hasattr(err, "buffer") else err.write(chunk.decode("utf-8", "replace"))
                err.flush()
            except (OSError, ValueError):
                pass

    def collect():
        while True:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return
            out.extend(chunk)

    failed = []
    over = threading.Event()

    def watch():  # fail_fast: the first trial in error stops the experiment (as Ctrl-C does)
        while not over.wait(0.25):
            found = _first_error(experiment_dir)
            if found:
                failed.append(found)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                return

    readers = [threading.Thread(target=forward, daemon=True), threading.Thread(target=collect, daemon=True)]
    if fail_fast:
        readers.append(threading.Thread(target=watch, daemon=True))
    for t in readers:
        t.start()
    interrupted = False
    while True:
        try:
            code = driver.serve(proc) if driver is not None and not interrupted else proc.wait()
            break
        except KeyboardInterrupt:
            # From a terminal the engine got SIGINT too; from kill(1) it did not.
            interrupted = True
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
    over.set()
    for t in readers:
        t.join()
    proc.stdout.close()
    proc.stderr.close()
    if failed and not interrupted:
        trial, error = failed[0]
        if fail_fast == "raise":
            raise TuneError(f"{trial} failed, and fail_fast stopped the experiment: {error}")
        return None
    if interrupted or code in (130, -signal.SIGINT):
        raise KeyboardInterrupt(f"the experiment was interrupted; every trial stopped. Continue it with "
                                f"Tuner.restore({experiment_dir!r}, trainable).fit() (or `tune resume "
                                f"{experiment_dir}`)")
    summary = None
    for line in reversed(bytes(out).decode("utf-8", "replace").splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except ValueError:
                continue
    if summary is None:
        from .. import _cluster
        where = _cluster.describe()
        raise TuneError((f"{where}: " if where else "") + _headline(bytes(tail)))
    return summary
