#!/usr/bin/env python3
"""Checks nvidia-smi samples (bench/smi_sample.sh) for two processes on one card at once:
  one_owner_check.py SAMPLES [--ignore PID,...]
Prints one JSON object: samples, the most processes seen on one card at once, and the
first sample where there were two (none: the run kept one owner per card)."""
import json
import sys
from collections import defaultdict

path = sys.argv[1]
ignore = set()
if len(sys.argv) > 3 and sys.argv[2] == "--ignore":
    ignore = {int(p) for p in sys.argv[3].split(",") if p}
samples, most, first_two = 0, 0, None
cards, t = defaultdict(set), None


def close():
    global most, first_two
    for card, pids in cards.items():
        most = max(most, len(pids))
        if len(pids) > 1 and first_two is None:
            first_two = {"time": t, "card": card, "pids": sorted(pids)}


for line in open(path):
    line = line.strip()
    if line.startswith("T "):
        if t is not None:
            close()
        samples += 1
        t, cards = float(line[2:]), defaultdict(set)
    elif line:
        pid, uuid = [x.strip() for x in line.split(",")[:2]]
        if pid.isdigit() and int(pid) not in ignore:
            cards[uuid].add(int(pid))
if t is not None:
    close()
print(json.dumps({"samples": samples, "most_on_one_card": most, "first_two": first_two}))
sys.exit(1 if first_two else 0)
