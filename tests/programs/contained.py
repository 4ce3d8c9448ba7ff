#!/usr/bin/env python3
"""A trial that tries to get out of its box: the program of tests/containment_test.cpp.
The mode comes from libtune.config()["mode"]:
  escape   starts a helper in a session of its own (setsid, double fork, its descriptors
           closed: what a daemon, `nohup` or some data loaders do), writes the helper's
           pid to --pids, reports and ends.
  forever  the same helper, then reports until it is stopped.
  bomb     forks sleepers until fork fails, says how many it got, reports, ends.
  hog      grows its memory by 16 MiB a step up to 1 GiB, reporting each step.
  spin     two busy threads for `seconds`, then reports its own CPU time.
  calm     reports `epochs` times, a little apart: the neighbour that must finish.
"""
import argparse
import os
import threading
import time

import libtune

parser = argparse.ArgumentParser()
parser.add_argument("--pids", default="")
args, _ = parser.parse_known_args()
cfg = libtune.config()
mode = cfg.get("mode", "calm")


def helper():
    """A sleeper in a new session whose parent is gone: reparented away from the trial."""
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            for fd in range(0, 3):
                os.dup2(os.open(os.devnull, os.O_RDWR), fd)
            os.closerange(3, w)
            os.closerange(w + 1, 1024)
            os.write(w, b"x")
            os.close(w)
            os.execvp("sleep", ["sleep", "300"])
        with open(args.pids, "a") as f:
            f.write("%d\n" % pid)
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # the sleeper runs
    os.close(r)
    os.wait()


if mode == "escape":
    helper()
    libtune.report(val_acc=0.5)
elif mode == "forever":
    helper()
    i = 0
    while True:
        i += 1
        libtune.report(val_acc=0.1 + 1e-6 * i)
        time.sleep(0.05)
elif mode == "bomb":
    kids = 0
    while kids < 100000:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids += 1
    print("forked %d" % kids, flush=True)
    libtune.report(val_acc=0.2, forked=kids)
elif mode == "hog":
    blocks = []
    for step in range(64):
        b = bytearray(16 << 20)
        b[::4096] = b"x" * len(b[::4096])
        blocks.append(b)
        libtune.report(val_acc=0.3, mib=16 * (step + 1))
elif mode == "spin":
    stop = time.time() + float(cfg.get("seconds", 3))

    def burn():
        while time.time() < stop:
            pass

    threads = [threading.Thread(target=burn) for _ in range(2)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    cpu = time.process_time()
    libtune.report(val_acc=0.4, cpu_share=cpu / wall)
else:
    for epoch in range(int(cfg.get("epochs", 10))):
        time.sleep(0.1)
        libtune.report(val_acc=0.9 + epoch * 1e-3)
