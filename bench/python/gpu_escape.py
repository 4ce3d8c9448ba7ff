"""A trial whose helper escapes it while holding GPU memory (bench/gpu_containment_check.sh).

The helper starts in a session of its own (setsid, double fork: what daemonizing
libraries, some data loaders and `nohup` do), allocates `gib` GiB on the trial's card with
PyTorch, writes its pid to `pids` and sleeps; the trial waits until the GPU audit has seen
the helper for a while, reports and ends normally. Contained, the helper dies with the
trial, and the trial's peak GPU memory includes it.
"""
import os
import time

import libtune

cfg = libtune.config()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        import torch

        x = torch.empty(int(float(cfg.get("gib", 2.5)) * (1 << 30)), dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        with open(cfg["pids"], "a") as f:
            f.write("%d\n" % os.getpid())
        os.write(w, b"x")
        os.close(w)
        time.sleep(600)
        os._exit(0)
    os._exit(0)
os.close(w)
os.read(r, 1)  # the helper holds its memory
os.wait()
time.sleep(float(cfg.get("hold_s", 2.0)))  # the audit looks every 200 ms
libtune.report(val_acc=0.5)
