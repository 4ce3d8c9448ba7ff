#!/usr/bin/env python3
"""foreign_cpu.py OUT_FILE [INTERVAL_S]: until SIGTERM, sample every process's CPU time
every INTERVAL_S (2) seconds and sum the CPU that build and test tools (compilers,
linkers, ninja, make, cmake, ctest, ...; other engineers' work on this machine) used
meanwhile; on SIGTERM write {"foreign_cpu_s", "foreign_top"} to OUT_FILE. A tool that
starts and ends between two samples is missed, so this is a lower bound."""
import json
import os
import signal
import sys
import time

TOOLS = {"cc1plus", "cc1", "c++", "g++", "gcc", "clang", "clang++", "ld", "ld.gold", "ld.lld", "collect2", "as",
         "ninja", "make", "cmake", "ctest", "lto1", "lto-wrapper", "cpack", "dpkg-deb", "debootstrap", "apt-get",
         "dpkg", "chromium", "sphinx-build", "doxygen", "pytest"}
HZ = os.sysconf("SC_CLK_TCK")


def sample():
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.find("(") + 1:text.rfind(")")]
        if comm not in TOOLS:
            continue
        fields = text[text.rfind(")") + 2:].split()
        out[int(name)] = (comm, (int(fields[11]) + int(fields[12])) / HZ)
    return out


def main():
    path, interval = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    seen, by_comm = {}, {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    first = True
    while not stop:
        for pid, (comm, cpu) in sample().items():
            before = seen.get(pid)
            # a process already running at the first sample counts from there; a new one
            # from its start
            delta = cpu - before[1] if before else (0.0 if first else cpu)
            by_comm[comm] = by_comm.get(comm, 0.0) + max(0.0, delta)
            seen[pid] = (comm, cpu)
        first = False
        time.sleep(interval)
    top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:5]
    with open(path, "w") as f:
        json.dump({"foreign_cpu_s": round(sum(by_comm.values()), 1),
                   "foreign_top": {k: round(v, 1) for k, v in top if v > 0}}, f)


if __name__ == "__main__":
    main()
