#!/usr/bin/env python3
"""A training script as users write them, standard library only: the program trial of
tests/program_test.cpp. `--mode` picks what it does; the configuration comes from
libtune.config() (or, for the modes that know nothing of libtune, from the command line).
"""
import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="train")
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--sleep", type=float, default=0.05)
parser.add_argument("--x", type=float, default=0.5)
parser.add_argument("--record", default="")  # a file to write what this process saw into
args, unknown = parser.parse_known_args()


def record(what):
    if args.record:
        with open(args.record, "a") as f:
            f.write(json.dumps(what) + "\n")


if args.mode == "stdout":
    # Knows nothing of libtune: its configuration on the command line, its metrics printed.
    for epoch in range(1, args.epochs + 1):
        time.sleep(args.sleep)
        print("epoch %d: loss=%.4f val_acc=%.4f, done" % (epoch, 1.0 / epoch, 1.0 - (args.x - 0.3) ** 2 - 0.1 / epoch),
              flush=True)
    sys.exit(0)

if args.mode == "exit":
    print("cannot load the data set: /data/missing.npz", file=sys.stderr)
    sys.exit(3)

if args.mode == "argv":
    files = sorted(os.path.relpath(os.path.join(d, f), ".") for d, _, fs in os.walk(".") for f in fs)
    env = {k: os.environ.get(k) for k in ("MY_VAR", "FORWARDED", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "HOME")}
    record({"argv": sys.argv[1:], "cwd": os.getcwd(), "files": files, "env": env})
    os.environ.get("TUNE_REPORT_FD") and os.write(int(os.environ["TUNE_REPORT_FD"]),
                                                  b'{"type": "result", "metrics": {"val_acc": 1}}\n')
    sys.exit(0)

if args.mode == "whoami":
    # Who it runs as, what it may reach: its uid, a file it writes (whose owner the test
    # checks), whether it can read its access secret or look into other trials' folders.
    with open("mine.txt", "w") as f:
        f.write("written by the trial\n")
    trial_dir = os.environ["TUNE_TRIAL_DIR"]
    me = os.path.basename(trial_dir)
    secret = os.path.join(trial_dir, "..", "..", "access", me)
    try:
        open(secret).read()
        read_secret = 1
    except OSError:
        read_secret = 0
    others = 0
    trials = os.path.dirname(trial_dir)
    for name in os.listdir(trials):
        if name != me and os.stat(os.path.join(trials, name)).st_uid != os.getuid():  # another account's
            try:
                os.listdir(os.path.join(trials, name))
                others += 1
            except OSError:
                pass
    metrics = {"val_acc": 1, "uid": os.getuid(), "gid": os.getgid(), "read_secret": read_secret, "others": others,
               "home_is_trial_dir": int(os.environ.get("HOME") == trial_dir)}
    os.write(int(os.environ["TUNE_REPORT_FD"]), (json.dumps({"type": "result", "metrics": metrics}) + "\n").encode())
    sys.exit(0)

import libtune  # noqa: E402 (after the modes that must not need it)

cfg = libtune.config()
x = float(cfg.get("x", args.x))

if args.mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    libtune.report(val_acc=0.1)
    while True:
        time.sleep(1)

if args.mode == "two-objectives":
    # Accuracy best at x = 0.3, cost growing with x, and a constraint: x <= 0.6.
    for epoch in range(1, 3):
        libtune.report(acc=1.0 - (x - 0.3) ** 2, cost=x, over=x - 0.6)
    sys.exit(0)

if args.mode == "no-metric":
    for i in range(3):
        libtune.report(loss=1.0 / (i + 1))
    sys.exit(0)

if args.mode == "not-a-number":
    os.write(int(os.environ["TUNE_REPORT_FD"]), b'{"type": "result", "metrics": {"val_acc": "high"}}\n')
    time.sleep(5)
    sys.exit(0)

if args.mode == "garbage":
    fd = int(os.environ["TUNE_REPORT_FD"])
    os.write(fd, b"this is not json\n{\"type\": \"what\"}\n[1, 2]\n")
    libtune.report(val_acc=0.5)
    sys.exit(0)

if args.mode == "flood":
    # As many reports as it can write, for a while: the node reads it at the pace its
    # owner takes them in, and nobody's memory grows without bound.
    fd = int(os.environ["TUNE_REPORT_FD"])
    line = b'{"type": "result", "metrics": {"val_acc": 0.5, "pad": "' + b"x" * 200 + b'"}}\n'
    chunk = line * 256
    end = time.time() + float(cfg.get("flood_s", 4))
    written = 0
    while time.time() < end:
        written += os.write(fd, chunk) // len(line)  # whole lines: the pipe takes a write of <= 64 KiB at once
    os.write(fd, b'{"type": "result", "metrics": {"val_acc": 0.9}}\n')
    record({"flooded": written})
    sys.exit(0)

# --mode train: a model whose accuracy rises with the epochs and peaks at x = 0.3, a
# checkpoint every epoch (the state it needs to go on), stops when asked.
start = 0
state_file = None
if libtune.restore_dir():
    with open(os.path.join(libtune.restore_dir(), "state.json")) as f:
        start = json.load(f)["epoch"]
record({"trial": libtune.trial_id(), "restored_from": start, "cwd": os.getcwd(), "pid": os.getpid()})
libtune.should_stop()  # stop-aware: it ends on its own between epochs
epochs = int(cfg.get("epochs", args.epochs))
for epoch in range(start + 1, epochs + 1):
    time.sleep(float(cfg.get("sleep", args.sleep)))
    acc = 1.0 - (x - 0.3) ** 2 - 0.1 / epoch
    d = libtune.checkpoint_dir(epoch)
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump({"epoch": epoch, "x": x}, f)
    libtune.report_checkpoint(epoch)
    if not libtune.report(val_acc=acc, epoch=epoch, restored=start):
        break
