"""A warm Python interpreter that starts Python trials by forking (docs/programs.md).

A node starts one of these per Python interpreter its trials use, with the module folder
of libtune on PYTHONPATH and its end of a socket on fd 3, and asks it to start workers
exactly as it asks its C++ spawner (tune/trial/PROTOCOL.md: the same frames, the same
answers, the same keeper and the same five pipes). A worker whose command is this
interpreter running a script (`python3 train.py ...` or `python3 -m pkg ...`) is a fork
of this process that sets up the trial's descriptors, signals, environment, folder,
argv and sys.path as a fresh interpreter would have them and runs the script with
runpy: no interpreter start-up, no imports of json and the like again (a trial's
process costs about 8 ms of CPU instead of 20 on the development machine). Any other
command, or one whose environment would change how the interpreter starts (PYTHON*
variables other than PYTHONPATH, LD_LIBRARY_PATH, LD_PRELOAD, the locale, HOME), or
LIBTUNE_FRESH_PYTHON set, is exec'd as it is. What a script could tell: the modules
this process imported (json, socket, ctypes, runpy, ...) are already in sys.modules, so
a file of the same name beside the script does not shadow them; the hash seed is this
process's.

Never imported here: random (its state would be every trial's), libtune (a script
imports it itself, and its SIGTERM handler must come with that import), anything a
script might shadow needlessly. Single-threaded. A worker ends through
_exit_as_interpreter and never returns into the spawner's loop.
"""
import errno
import fcntl
import importlib
import json  # noqa: F401 (the warm part: a trial's `import libtune` needs it)
import gc
import os
import pkgutil  # noqa: F401 (runpy.run_path imports it: here, once)
import runpy
import select
import signal
import socket
import struct
import sys
import time

import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
_DEATH = signal.SIGRTMIN + 7  # as the C++ keeper: a signal nobody sends by habit
_QUIET = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE)
_ENV = dict(os.environ)
# What an interpreter reads as it starts (beyond PYTHON*): the loader's paths, the
# locale (the streams' encoding), HOME (the user's site-packages).
_STARTUP = ("LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT", "LANG", "LANGUAGE", "HOME")
_OWN_PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
# sys.path as a fresh interpreter builds it, less the script's folder and PYTHONPATH.
_BASE_PATH = [p for p in sys.path[1:] if p not in _OWN_PATH]
# Whether this interpreter started with its HOME's user site-packages on sys.path.
_OWN_USER_SITE = os.path.join(os.environ.get("HOME", ""), ".local", "lib",
                              "python%d.%d" % sys.version_info[:2], "site-packages") in _BASE_PATH


# --- The protocol's frames (PROTOCOL.md; tune/trial/spawn_protocol.hpp is the C++ side) --
# Every number in the machine's own byte order. Importing this file defines these and
# does nothing else; main() runs only when it is the script.

_WORD = struct.Struct("=i")      # a word: the fail and news pipes' frames
_LENGTH = struct.Struct("=I")    # a length: before a request's body and each of its fields
_ANSWER = struct.Struct("=ii")   # an answer: the keeper's pid, an errno
CHANNELS = ("out", "err", "report", "fail", "news")  # the five pipes, in the answer's order


def encode_word(v):
    return _WORD.pack(v)


def encode_answer(keeper, error):
    return _ANSWER.pack(keeper, error)


def decode_request(body):
    """A request's body: (argv, env, cwd, (into, join, kill, subreaper), (uid, gid,
    groups)). ValueError when it is malformed (PROTOCOL.md says what that is)."""
    at = 0

    def take():
        nonlocal at
        (n,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        s = body[at:at + n]
        at += n
        return s.decode("utf-8", "surrogateescape")

    def number(low, high):  # ASCII digits, after a '-' when low < 0; within [low, high]
        text = take()
        digits = text[1:] if low < 0 and text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()) or not low <= int(text) <= high:
            raise ValueError("a malformed request")
        return int(text)

    def count():  # of fields that follow: at most one per 4 bytes left
        n = number(0, len(body))
        if n > (len(body) - at) // 4:
            raise ValueError("a malformed request")
        return n

    try:
        argv = [take() for _ in range(count())]
        env = {}
        for _ in range(count()):
            k = take()
            env[k] = take()
        cwd = take()
        into = take()
        join = [take() for _ in range(count())]
        kill = take()
        subreaper = take() == "1"
        uid = number(-2**63, 2**63 - 1)
        gid = number(-2**63, 2**63 - 1)
        groups = [number(0, 2**32 - 1) for _ in range(count())]
    except struct.error:
        raise ValueError("a malformed request") from None
    if at != len(body) or not argv:
        raise ValueError("a malformed request")
    return argv, env, cwd, (into, join, kill, subreaper), (uid, gid, groups)


def _read_full(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_request(sock):
    """The next request's body; None when the channel ended (the node is gone)."""
    head = _read_full(sock, _LENGTH.size)
    if head is None:
        return None
    return _read_full(sock, _LENGTH.unpack(head)[0])


def send_answer(sock, keeper, error, fds):
    """An answer, with the five read ends `fds` (in CHANNELS' order) when it started."""
    data = encode_answer(keeper, error)
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=%di" % len(fds), *fds))])
    else:
        sock.sendall(data)


# --- The spawner, its keepers and their workers ------------------------------------


def _warm(argv, env):
    """Whether the worker may run here instead of exec'ing a new interpreter."""
    if len(argv) < 2 or env.get("LIBTUNE_FRESH_PYTHON"):
        return False
    # The same interpreter by the same path (a venv's python3 links to the system's one
    # but finds its venv through its own path).
    if os.path.abspath(argv[0]) != os.path.abspath(sys.executable):
        return False
    if argv[1] == "-m":
        if len(argv) < 3:
            return False
    elif argv[1].startswith("-"):
        return False
    for k in set(env) | set(_ENV):
        startup = (k.startswith("PYTHON") and k != "PYTHONPATH") or k.startswith("LC_") or k in _STARTUP
        if startup and env.get(k) != _ENV.get(k) and not (k == "HOME" and _same_user_site(env.get(k))):
            return False
    return True


def _user_site(home):
    """The user site-packages folder a fresh interpreter adds to sys.path for this HOME
    (PEP 370), when it is there."""
    if not home or sys.flags.no_user_site:
        return None
    path = os.path.join(home, ".local", "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    return path if os.path.isdir(path) else None


def _same_user_site(home):
    """Whether a fresh interpreter with this HOME starts with this one's sys.path: HOME
    only matters for the user site-packages, so another HOME is the same start when
    neither has one (a trial's own folder as HOME, the usual case with trial accounts)."""
    return not _OWN_USER_SITE and _user_site(home) is None


def _fail(fd, code):
    try:
        os.write(fd, encode_word(code))
    finally:
        os._exit(127)


def _print_exception(script, exc):
    """As the interpreter prints an uncaught exception, from the script's own frames on."""
    import traceback
    if sys.excepthook is not sys.__excepthook__:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return
    tb = exc.__traceback__
    if script:
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next
    else:  # -m: from the module's frames on (past this file's and runpy's)
        while tb is not None and (tb.tb_frame.f_globals.get("__name__") == "runpy" or
                                  tb.tb_frame.f_code.co_filename == __file__):
            tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _show_as(argv):
    """Makes `ps` and /proc show this process as the trial's command, not as the warm
    interpreter: its argument area (as long as the spawner's own, padded for this) is
    overwritten with `argv`, and its name is the script's."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
        data = b"\0".join(a.encode("utf-8", "surrogateescape") for a in argv) + b"\0"
        size = end - start
        if size > 0:
            data = data[:size - 1] + b"\0" if len(data) >= size else data + b"\0" * (size - len(data))
            ctypes.memmove(start, data, size)
        name = os.path.basename(argv[2] if argv[1] == "-m" else argv[1]).encode()[:15]
        _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, ValueError, IndexError):
        pass


def _run_here(argv, env):
    """Runs the script in this (forked) process as `argv` would run it; never returns."""
    _show_as(argv)
    os.environ.clear()
    os.environ.update(env)
    code = _run_script(argv, _paths(argv))
    # A reused worker (docs/trials.md, "Reused workers"): the script ended well, so this
    # process may run the experiment's next trial on the same cards, its imports (torch)
    # and its CUDA context still there.
    while code in (None, 0) and os.environ.get("TUNE_REUSE_DIR"):
        try:
            if not _next_trial():
                break
        except SystemExit as e:  # a stop (libtune's SIGTERM handler) while it waited
            code = e.code
            break
        except BaseException as e:  # noqa: B902 (never back into the spawner's loop)
            _print_exception("", e)
            code = 1
            break
        code = _run_script(argv, _paths(argv))  # in the next trial's folder: its copy of the script
    _exit_as_interpreter(code)


def _paths(argv):
    """sys.argv and sys.path as `argv` run in the current folder would have them; the
    script's absolute path (None for -m)."""
    sys.argv = argv[1:] if argv[1] != "-m" else argv[2:]
    try:
        sys.orig_argv = list(argv)
    except AttributeError:
        pass
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if argv[1] == "-m":
        first, script = os.getcwd(), None
    else:
        script = os.path.abspath(argv[1])
        first = os.path.dirname(script)
    sys.path[:] = [first] + extra + _BASE_PATH
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    return script


def _run_script(argv, script):
    """Runs the script (or module) once as __main__; the exit status it asks for."""
    code = 0
    try:
        if script is None:
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        elif not os.path.exists(script):
            sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n"
                             % (argv[0], argv[1], errno.ENOENT, os.strerror(errno.ENOENT)))
            code = 2
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException as e:  # noqa: B902 (what the interpreter does with it)
        _print_exception(script or "", e)
        code = 1
    return code


_IDLE = b'{"type":"idle"}\n'  # the protocol of tune/trial/reuse.hpp
_ADOPTED = b'{"type":"adopted"}\n'
_IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_DELETE_SELF, _IN_IGNORED = 0x8, 0x80, 0x400, 0x8000
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_watch = [-1, None]  # the inotify fd and the folder it watches: kept from one wait to the next


def _next_trial():
    """After a trial that ended well, with TUNE_REUSE_DIR: says "idle" on the report
    channel and waits for the node's next.json there; with it, takes that trial's
    environment and folder, forgets what libtune kept of the last trial, says "adopted"
    and returns True. False (the worker then exits as usual): no next trial came within
    TUNE_REUSE_WAIT_MS, or the script left threads or streams behind that the next trial
    must not share (only the main thread may be left)."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return False
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: B902
            return False
    folder = os.environ["TUNE_REUSE_DIR"]
    try:
        fd = int(os.environ.get("TUNE_REPORT_FD", "3"))
        wait_ms = max(0, int(os.environ.get("TUNE_REUSE_WAIT_MS", "2000")))
        os.write(fd, _IDLE)
    except (OSError, ValueError):
        return False
    nxt = _wait_for_next(folder, wait_ms)
    if nxt is None:
        return False
    env, cwd = nxt
    os.environ.clear()
    os.environ.update(env)
    try:
        if cwd:
            os.chdir(cwd)
    except OSError as e:
        sys.stderr.write("libtune worker: cannot change to the next trial's folder %s: %s\n" % (cwd, e.strerror))
        os._exit(2)
    os.environ["TUNE_WORKER_REUSED"] = "1"
    lt = sys.modules.get("libtune")
    if lt is not None and hasattr(lt, "_next_trial"):
        lt._next_trial()
    try:
        os.write(fd, _ADOPTED)
    except OSError:
        os._exit(2)
    return True


def _take_next(folder):
    """Reads and removes folder/next.json: (env, cwd), None when it is not there; a file
    that is not a next trial ends the worker (status 2) with the reason on stderr."""
    path = os.path.join(folder, "next.json")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return None
    try:
        os.unlink(path)
    except OSError:
        pass
    try:
        j = json.loads(text)
        env, cwd = j["env"], j.get("cwd", "")
        if not isinstance(env, dict) or not isinstance(cwd, str) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        sys.stderr.write('libtune worker: %s is not a next trial (a JSON object with "env" and "cwd")\n' % path)
        os._exit(2)
    return env, cwd


def _wait_for_next(folder, wait_ms):
    fd, watched = _watch
    if fd < 0 or watched != folder:
        if fd >= 0:
            os.close(fd)
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd >= 0 and _libc.inotify_add_watch(fd, os.fsencode(folder),
                                               _IN_MOVED_TO | _IN_CLOSE_WRITE | _IN_DELETE_SELF) < 0:
            missing = ctypes.get_errno() == errno.ENOENT
            os.close(fd)
            fd = -1
            if missing:
                _watch[:] = [-1, None]
                return None  # the node ended the wait
        _watch[:] = [fd, folder]
    deadline = time.monotonic() + wait_ms / 1000.0
    poller = select.poll()
    if fd >= 0:
        poller.register(fd, select.POLLIN)
    while True:
        got = _take_next(folder)  # after the watch is set: a file written before it is seen
        if got is not None:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if fd < 0:  # no inotify: look every 5 ms
            time.sleep(min(left, 0.005))
            continue
        try:
            poller.poll(max(1, int(left * 1000)))
        except InterruptedError:
            continue
        gone = False
        while True:
            try:
                buf = os.read(fd, 4096)
            except BlockingIOError:
                break
            if not buf:
                break
            at = 0
            while at + 16 <= len(buf):
                _wd, mask, _cookie, length = struct.unpack_from("=iIII", buf, at)
                gone = gone or bool(mask & (_IN_DELETE_SELF | _IN_IGNORED))
                at += 16 + length
        if gone:
            os.close(fd)
            _watch[:] = [-1, None]
            return _take_next(folder)


def _exit_as_interpreter(code):
    """Ends the worker as the interpreter's exit would (Py_FinalizeEx's steps that a
    program can see), without tearing down the modules it shares with the warm
    interpreter (that would copy their pages only to free them: about a third of a small
    trial's CPU): non-daemon threads are waited for, atexit handlers run, every open
    stream the script made is flushed, then the exit status the interpreter would give.
    (Python does not promise __del__ for objects alive at exit either.)"""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:  # sys.exit("message"): printed, status 1
        try:
            sys.stderr.write(str(code) + "\n")
        except Exception:  # noqa: B902
            pass
        status = 1
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except Exception:  # noqa: B902
            pass
    import atexit
    atexit._run_exitfuncs()
    import io
    for generation in (0, 1, 2):  # what the script made (the warm interpreter's is frozen)
        for o in gc.get_objects(generation):
            if isinstance(o, io.IOBase):
                try:
                    if not o.closed and o.writable():
                        o.flush()
                except Exception:  # noqa: B902 (as at exit: a stream that cannot flush is left)
                    pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: B902
            status = status or 120  # as the interpreter: its streams could not be flushed
    os._exit(status)


def _worker(argv, env, cwd, out_w, err_w, rep_w, fail_w, keeper, run_as):
    uid, gid, groups = run_as
    if uid >= 0:  # its account first: a change of credentials clears the death signal
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as e:
            _fail(fail_w, e.errno or errno.EPERM)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # it dies with its keeper
    if os.getppid() != keeper:
        os._exit(127)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for s in range(1, signal.NSIG):
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    # What a fresh interpreter sets itself.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    fail = fcntl.fcntl(fail_w, fcntl.F_DUPFD_CLOEXEC, 64)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(rep_w, 3)
        for fd in range(4):  # kept by an exec (os.open and a dup2 onto itself leave close-on-exec)
            os.set_inheritable(fd, True)
        os.closerange(4, fail)
        os.closerange(fail + 1, 1 << 20)
        if cwd:
            os.chdir(cwd)
    except OSError as e:
        _fail(fail, e.errno or errno.EIO)
    if not _warm(argv, env):
        try:
            os.execve(argv[0], argv, env)
        except OSError as e:
            _fail(fail, e.errno or errno.ENOEXEC)
    os.close(fail)  # as an exec that worked: the node now waits for the worker's end
    _run_here(argv, env)


def _kill_descendants():
    """As a child subreaper after the worker ended (keeper.cpp's kill_descendants): kills
    every process still below the keeper until none is left; how many had left its group."""
    me = os.getpid()
    path = "/proc/self/task/%d/children" % me
    seen, escaped = set(), 0
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return escaped
        try:
            with open(path) as f:
                kids = [int(p) for p in f.read().split()]
        except OSError:
            return escaped  # a kernel without /proc/.../children: the group's kill is all there is
        except ValueError:
            kids = []
        for pid in kids:
            if pid not in seen:
                seen.add(pid)
                try:
                    if os.getpgid(pid) != me:
                        escaped += 1
                except OSError:
                    pass
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return escaped


def _keeper(argv, env, cwd, fds, node, contain, run_as):
    """The first child, leader of the trial's process group, parent of the worker
    (tune/trial/keeper.cpp's run_keeper, in Python)."""
    out_w, err_w, rep_w, fail_w, news_w = fds
    into, join, kill, subreaper, born_inside = contain
    os.setpgid(0, 0)
    me = os.getpid()
    if into and not born_inside:  # no clone3 here: it moves itself
        join = [into + "/cgroup.procs"] + join
    for path in join:  # into the trial's cgroups before the worker starts
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            os.write(fd, str(me).encode())
            os.close(fd)
        except OSError as e:
            _fail(fail_w, -(e.errno or errno.EIO))
    kill_fd = os.open(kill, os.O_WRONLY | os.O_CLOEXEC) if kill else -1
    if subreaper:
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def on_node_death(signum, frame):
        if kill_fd >= 0:
            try:
                os.write(kill_fd, b"1")  # everything in the cgroup, the keeper too
                return
            except OSError:
                pass
        if subreaper:
            _kill_descendants()
        os.killpg(me, signal.SIGKILL)

    signal.signal(_DEATH, on_node_death)
    for s in _QUIET:
        signal.signal(s, lambda signum, frame: None)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    _libc.prctl(_PR_SET_PDEATHSIG, int(_DEATH), 0, 0, 0)
    if os.getppid() != node:
        on_node_death(0, None)
    worker = os.fork()
    if worker == 0:
        _worker(argv, env, cwd, out_w, err_w, rep_w, fail_w, me, run_as)
    for fd in (out_w, err_w, rep_w, fail_w):
        os.close(fd)
    os.write(news_w, encode_word(worker))
    while True:  # a subreaper reaps the orphans that come to it meanwhile
        pid, status = os.waitpid(-1 if subreaper else worker, 0)
        if pid == worker:
            break
    os.write(news_w, encode_word(status))
    if subreaper:
        os.write(news_w, encode_word(_kill_descendants()))
    os.close(news_w)
    os.killpg(me, signal.SIGKILL)  # the worker's children, then the keeper itself
    os._exit(0)


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls", "set_tid",
        "set_tid_size", "cgroup")]


_SYS_CLONE3 = 435  # x86-64 and arm64 alike
_CLONE_INTO_CGROUP = 0x200000000


def _fork_into(cgroup_dir):
    """os.fork(), the child born in the cgroup v2 folder `cgroup_dir` (clone3 with
    CLONE_INTO_CGROUP: no move, which would wait for an RCU grace period); with the
    interpreter's own fork hooks around it, as C code that forks must call them. None
    when the kernel cannot (the caller forks and the child moves itself)."""
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        args = _CloneArgs(flags=_CLONE_INTO_CGROUP, exit_signal=int(signal.SIGCHLD), cgroup=fd)
        api = ctypes.pythonapi  # holds the GIL through the calls, as os.fork does
        api.PyOS_BeforeFork()
        pid = api.syscall(ctypes.c_long(_SYS_CLONE3), ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
        if pid == 0:
            api.PyOS_AfterFork_Child()
            return 0
        api.PyOS_AfterFork_Parent()
        return pid if pid > 0 else None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _start(sock, argv, env, cwd, contain, run_as):
    """Forks a keeper; its pid and the read ends of the five pipes."""
    pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(5)]
    me = os.getpid()
    into = contain[0]
    keeper = _fork_into(into) if into else None
    contain = tuple(contain) + (keeper is not None,)
    if keeper is None:
        keeper = os.fork()
    if keeper == 0:
        # The keeper and, after its fork, the worker: neither returns (os._exit); should
        # anything be raised on the way, it must not return into the spawner's loop in a
        # child either.
        try:
            sock.close()
            for r, _ in pipes:
                os.close(r)
            writes = [w for _, w in pipes]
            start = 0
            for fd in sorted(writes):
                os.closerange(start, fd)
                start = fd + 1
            os.closerange(start, 1 << 20)
            _keeper(argv, env, cwd, writes, me, contain, run_as)
        except Exception:  # noqa: B902
            os._exit(127)
    try:
        os.setpgid(keeper, keeper)  # also here: no moment in which a signal to the group misses it
    except OSError:
        pass  # it did it itself already (or is gone)
    for _, w in pipes:
        os.close(w)
    return keeper, [r for r, _ in pipes]


def main():
    # Warm: what the first run of a script sets up (runpy's imports, the parser's state)
    # is done here once; then everything is moved out of the collector's reach, so that
    # no collection in a fork writes to (and copies) the pages it shares with this one.
    runpy.run_path(os.devnull, run_name="__warmup__")
    gc.freeze()
    sock = socket.socket(fileno=3)
    for s in _QUIET:
        signal.signal(s, signal.SIG_IGN)
    while True:
        ready, _, _ = select.select([sock], [], [], 1.0)
        while True:  # keepers that ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not ready:
            continue
        body = read_request(sock)
        if body is None:
            break  # the node is gone: its keepers kill their groups
        keeper, error, fds = 0, 0, []
        try:
            argv, env, cwd, contain, run_as = decode_request(body)
            keeper, fds = _start(sock, argv, env, cwd, contain, run_as)
        except (ValueError, struct.error, UnicodeDecodeError):
            error = errno.EINVAL
        except OSError as e:
            error = e.errno or errno.EAGAIN
        send_answer(sock, keeper, error, fds)
        for fd in fds:
            os.close(fd)
    os._exit(0)


if __name__ == "__main__":
    main()
