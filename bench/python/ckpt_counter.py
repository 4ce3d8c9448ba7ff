# A trial that checkpoints every epoch and goes on from its checkpoint when started from
# one (the failover and rebalance checks' workload without a GPU: bench/gpu_issue24_run.sh
# DRY=1). Config: epochs, epoch_s (the sleep standing in for an epoch's work).
import json
import os
import time

import libtune

cfg = libtune.config()
start = 0
if libtune.restore_dir():
    with open(os.path.join(libtune.restore_dir(), "state.json")) as f:
        start = json.load(f)["epoch"]
for epoch in range(start + 1, int(cfg["epochs"]) + 1):
    time.sleep(float(cfg["epoch_s"]))
    folder = libtune.checkpoint_dir(epoch)
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"epoch": epoch}, f)
    libtune.report_checkpoint(epoch)
    if not libtune.report(val_acc=epoch / float(cfg["epochs"]), epoch=epoch, resumed_from=start) or libtune.should_stop():
        break
