#!/usr/bin/env python3
"""A trial that uses its cards as a GPU program would, on a simulated view of the cards
(TUNE_SIMULATED_GPUS, tune/host/simulated_gpus.hpp): it "opens a context" on each card in
its CUDA_VISIBLE_DEVICES by writing its own procs file there (what the driver would list),
runs a while, reports, and exits (the file of an ended process no longer counts).
Standard library only; the test of tests/gpu_sharing_test.cpp.

--hold MiB       memory it holds on each of its cards
--seconds S      how long it runs
--record FILE    appends {"pid", "cards", "start", "end", "uid", "home", "data"} to FILE
--data PATH      a file it reads (its text goes into the record; missing: it fails)
"""
import argparse
import json
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--hold", type=int, default=1024)
parser.add_argument("--seconds", type=float, default=0.3)
parser.add_argument("--record", default="")
parser.add_argument("--data", default="")
args, _ = parser.parse_known_args()

start = time.time()
cards = [c for c in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if c]
view = os.environ.get("TUNE_SIMULATED_GPUS", "")
if view and cards:
    procs = os.path.join(view, "procs")
    tmp = os.path.join(procs, "%d.tmp" % os.getpid())
    with open(tmp, "w") as f:
        json.dump({c: args.hold << 20 for c in cards}, f)
    os.rename(tmp, os.path.join(procs, str(os.getpid())))

data = None
if args.data:
    with open(os.path.expanduser(args.data)) as f:  # a missing file fails the trial, as it would by hand
        data = f.read().strip()

time.sleep(args.seconds)
if args.record:
    with open(args.record, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "cards": cards, "start": start, "end": time.time(), "uid": os.getuid(),
                            "home": os.environ.get("HOME", ""), "data": data, "cwd": os.getcwd()}) + "\n")
fd = os.environ.get("TUNE_REPORT_FD")
if fd:
    os.write(int(fd), b'{"type": "result", "metrics": {"score": 1}}\n')
else:
    print("score=1", flush=True)
