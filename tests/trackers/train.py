"""A trial for the trackers' tests: reports loss and acc for
`epochs` iterations, checkpoints every other one, and fails after two results when its
configuration says so."""
import os

import libtune

cfg = libtune.config()
start = libtune.restore_iteration() or 0
for epoch in range(start + 1, cfg["epochs"] + 1):
    loss = (cfg["lr"] - 0.1) ** 2 + 1.0 / epoch
    libtune.report(loss=loss, acc=1.0 - loss / 2, grad_norm=epoch * cfg["lr"])
    if epoch % 2 == 0:
        with open(os.path.join(libtune.checkpoint_dir(epoch), "model.txt"), "w") as f:
            f.write(f"{epoch} {cfg['lr']}\n")
        libtune.report_checkpoint(epoch)
    if cfg["fail"] and epoch == 2:
        raise SystemExit("failing on purpose (fail: true)")
