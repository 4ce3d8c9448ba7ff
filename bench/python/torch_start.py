#!/usr/bin/env python3
"""Does a trial forked from a warm interpreter start PyTorch slower than an exec'd one?
Alternately, N times each: (a) a fork of this process, after the imports a warm
interpreter has and gc.freeze() (tune/trial/python_spawner.py), and (b) a fresh
interpreter exec'd; each child times `import torch` and its CUDA context. Medians, one
JSON line."""
import gc, json, os, select, socket, statistics, struct, subprocess, sys, time  # noqa: F401
import ctypes, fcntl, importlib, pkgutil, runpy  # noqa: F401 (as the warm interpreter)

CHILD = ("import time, json, os, sys\nt0 = time.perf_counter()\nimport torch\nt1 = time.perf_counter()\n"
         "torch.zeros(1, device='cuda' if torch.cuda.is_available() else 'cpu')\n"
         "if torch.cuda.is_available(): torch.cuda.synchronize()\nt2 = time.perf_counter()\n"
         "os.write(1, (json.dumps([t1 - t0, t2 - t1]) + '\\n').encode())\n")


def forked():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        exec(compile(CHILD, "child", "exec"), {"__name__": "__main__"})
        sys.stdout.flush()
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(out)


def execd():
    return json.loads(subprocess.run([sys.executable, "-c", CHILD], capture_output=True, check=True).stdout)


runpy.run_path(os.devnull, run_name="__warmup__")
gc.freeze()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
got = {"fork": [], "exec": []}
for i in range(n):
    for how, f in (("fork", forked), ("exec", execd)) if i % 2 == 0 else (("exec", execd), ("fork", forked)):
        got[how].append(f())
print(json.dumps({how: {"import_torch_s": round(statistics.median(v[0] for v in runs), 3),
                        "cuda_context_s": round(statistics.median(v[1] for v in runs), 3), "runs": len(runs)}
                  for how, runs in got.items()}))
