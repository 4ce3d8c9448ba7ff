#!/usr/bin/env python3
"""How soon a trial that waits for another program's card starts once that program ends
(issue 39: median <= 1.5 s). Each repeat: a program that is no cluster's holds the card;
`tune run` (an embedded cluster) asks for it and says it waits; the program is killed at
t0; the trial's script writes time.time() as its first act; the latency is that minus t0.

  --simulated   the card is a simulated one (TUNE_SIMULATED_GPUS, no GPU needed): the other
                program is `sleep` holding 10 GiB of a 16 GiB card in the view's files
  --real        the machine's GPU 0 (NVML): the other program is python3 with PyTorch
                holding --hold-gib GiB on it (run on the GPU machine)
  --gpu G       what the trial asks (default 1: a whole card; 0.5 for a share)
Last line: one JSON object with every latency, the median, p90 and how the waits read.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--tune", required=True)
parser.add_argument("--repeats", type=int, default=10)
parser.add_argument("--gpu", default="1")
parser.add_argument("--hold-gib", type=float, default=100)
mode = parser.add_mutually_exclusive_group(required=True)
mode.add_argument("--simulated", action="store_true")
mode.add_argument("--real", action="store_true")
args = parser.parse_args()

work = tempfile.mkdtemp(prefix="foreign-wait-")
os.chmod(work, 0o755)
env = dict(os.environ, TUNE_SHARED_DIR=os.path.join(work, "shared"))
if args.simulated:
    view = os.path.join(work, "gpus")
    os.makedirs(os.path.join(view, "procs"))
    with open(os.path.join(view, "cards.json"), "w") as f:
        json.dump([{"uuid": "GPU-sim-0", "memory": "16GiB"}], f)
    env["TUNE_SIMULATED_GPUS"] = view
    env["CUDA_VISIBLE_DEVICES"] = ""
record = os.path.join(work, "starts.txt")
trial = os.path.join(work, "trial.py")
with open(trial, "w") as f:
    f.write("import os, time\nwith open(%r, 'a') as f: f.write('%%.6f\\n' %% time.time())\n"
            "fd = os.environ.get('TUNE_REPORT_FD')\n"
            "fd and os.write(int(fd), b'{\"type\": \"result\", \"metrics\": {\"score\": 1}}\\n')\n" % record)

HOLDER = """import sys, time, torch
x = torch.empty(int(%f * (1 << 30)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
"""


def start_other():
    if args.simulated:
        p = subprocess.Popen(["sleep", "600"])
        tmp = os.path.join(view, "procs", "%d.tmp" % p.pid)
        with open(tmp, "w") as f:
            json.dump({"GPU-sim-0": 10 << 30}, f)
        os.rename(tmp, os.path.join(view, "procs", str(p.pid)))
        return p
    p = subprocess.Popen([sys.executable, "-c", HOLDER % args.hold_gib], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
    if p.stdout.readline().strip() != "ready":
        sys.exit("the program that holds the card did not start")
    return p


latencies, reasons = [], []
try:
    for i in range(args.repeats):
        other = start_other()
        run = subprocess.Popen([args.tune, "run", "--local", "--metric", "score", "--mode", "max", "--samples", "1",
                                "--gpus-per-trial", args.gpu, "--progress", "lines", "--name", "wait%d" % i,
                                "--experiment-dir", os.path.join(work, "exp%d" % i), "--", sys.executable, trial],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work)
        waiting = threading.Event()
        lines = []

        def read():
            for line in run.stderr:
                lines.append(line)
                if "waits for its placement" in line:
                    reasons.append(line.strip())
                    waiting.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if not waiting.wait(60):
            run.kill()
            other.kill()
            sys.exit("repeat %d: the trial never said it waits:\n%s" % (i, "".join(lines)))
        time.sleep(1.0)
        t0 = time.time()
        other.send_signal(signal.SIGKILL)
        other.wait()
        run.wait(120)
        reader.join(5)
        with open(record) as f:
            starts = [float(x) for x in f.read().split()]
        if run.returncode != 0 or len(starts) != i + 1:
            sys.exit("repeat %d: tune run ended with %s:\n%s" % (i, run.returncode, "".join(lines)))
        latencies.append(starts[-1] - t0)
        print("repeat %d: started %.3f s after the other program ended" % (i, latencies[-1]), file=sys.stderr)
finally:
    shutil.rmtree(work, ignore_errors=True)

latencies.sort()
print(json.dumps({"mode": "simulated" if args.simulated else "real", "gpu": args.gpu, "repeats": args.repeats,
                  "latency_s": [round(x, 4) for x in latencies], "median_s": round(statistics.median(latencies), 4),
                  "p90_s": round(latencies[int(0.9 * (len(latencies) - 1))], 4), "first_reason": reasons[:1]}))
