"""What each step of a trial's cgroup costs on this machine (as root, cgroup v2):
making it with limits, moving a freshly forked process into it, that process's first
page faults there, killing and removing it. Medians in ms over N rounds, as JSON.
Run: python3 bench/python/cgroup_cost.py [ROUNDS] [BASE]   (BASE: a cgroup folder)"""
import json
import os
import statistics
import sys
import time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
base = sys.argv[2] if len(sys.argv) > 2 else "/sys/fs/cgroup/libtune/cost.%d" % os.getpid()
os.makedirs(base, exist_ok=True)
for c in ("memory", "cpu", "pids"):
    try:
        with open(base + "/cgroup.subtree_control", "w") as f:
            f.write("+" + c)
    except OSError:
        pass
times = {k: [] for k in ("mkdir_limits", "fork_only", "fork_join", "join_write", "touch_64mib_in", "touch_64mib_out", "kill_rmdir")}


def ms(t0):
    return (time.perf_counter() - t0) * 1000


def child(join, r, w):
    t0 = time.perf_counter()
    if join:
        with open(join, "w") as f:
            f.write(str(os.getpid()))
    t_join = ms(t0)
    t1 = time.perf_counter()
    b = bytearray(64 << 20)
    b[::4096] = b"x" * len(b[::4096])
    os.write(w, json.dumps([t_join, ms(t1)]).encode())
    os._exit(0)


for i in range(rounds):
    d = "%s/t%d" % (base, i)
    t0 = time.perf_counter()
    os.mkdir(d)
    for name, value in (("memory.max", str(1 << 30)), ("cpu.max", "100000 100000"), ("pids.max", "1000")):
        try:
            with open(d + "/" + name, "w") as f:
                f.write(value)
        except OSError:
            pass
    times["mkdir_limits"].append(ms(t0))
    for join in (None, d + "/cgroup.procs"):
        r, w = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child(join, r, w)
        os.close(w)
        data = json.loads(os.read(r, 1000))
        os.close(r)
        os.waitpid(pid, 0)
        if join:
            times["fork_join"].append(ms(t0))
            times["join_write"].append(data[0])
            times["touch_64mib_in"].append(data[1])
        else:
            times["fork_only"].append(ms(t0))
            times["touch_64mib_out"].append(data[1])
    t0 = time.perf_counter()
    with open(d + "/cgroup.kill", "w") as f:
        f.write("1")
    while True:
        try:
            os.rmdir(d)
            break
        except OSError:
            time.sleep(0.0001)
    times["kill_rmdir"].append(ms(t0))
os.rmdir(base)
print(json.dumps({k: round(statistics.median(v), 3) for k, v in times.items()} | {"rounds": rounds, "max_join_write": round(max(times["join_write"]), 3)}))
