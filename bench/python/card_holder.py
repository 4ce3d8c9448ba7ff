#!/usr/bin/env python3
"""A trial that holds its card as a PyTorch training would: allocates --hold-gib GiB on
cuda:0 (the card it was given), computes for --seconds, reports once, and writes
{"pid", "card", "start", "end"} to --record (the GPU runs of bench/gpu_issue39_run.sh)."""
import argparse
import json
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--hold-gib", type=float, default=2)
parser.add_argument("--seconds", type=float, default=3)
parser.add_argument("--record", default="")
args, _ = parser.parse_known_args()

start = time.time()
x = torch.empty(int(args.hold_gib * (1 << 30)), dtype=torch.uint8, device="cuda")
a = torch.randn(2048, 2048, device="cuda")
while time.time() - start < args.seconds:
    a = torch.tanh(a @ a / 2048)
torch.cuda.synchronize()
if args.record:
    with open(args.record, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "card": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "start": start,
                            "end": time.time()}) + "\n")
fd = os.environ.get("TUNE_REPORT_FD")
if fd:
    os.write(int(fd), b'{"type": "result", "metrics": {"score": 1}}\n')
