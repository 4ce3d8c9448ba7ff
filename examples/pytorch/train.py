#!/usr/bin/env python3
"""Fashion-MNIST with PyTorch: the kind of training script people tune, as a libtune trial.

    tune run examples/pytorch/experiment.yaml          # tune it (docs/run.md)
    python3 examples/pytorch/train.py --epochs 2        # or run it by hand

Inside a trial it takes its hyperparameters from libtune.config(), trains on exactly the
card(s) of its bundle (CUDA numbers them 0..k-1 inside the trial: libtune.device_ids()
are the only valid device_ids for nn.DataParallel), reports val_acc every epoch and
test_acc after the last, checkpoints every epoch and continues from a checkpoint when it
is started from one (ASHA, HyperBand, PBT, a restart after a failure). Its first result
also says where its start-up went: importing torch, the CUDA context, the data.

The data: the IDX files of Fashion-MNIST (Debian's dataset-fashion-mnist) in --data,
else $TUNE_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist. Only PyTorch is
needed (no numpy, no torchvision).
"""
import argparse
import gzip
import os
import struct
import sys
import time

T0 = time.time()
T0_BOOT = time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else None
import torch  # noqa: E402 (timed)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

T_IMPORT = time.time()
import libtune  # noqa: E402 (put on PYTHONPATH by the node; outside a trial too: pip install ./python)

MEAN, STD = 0.2860, 0.3530


def interpreter_seconds():
    """How long this process ran before its first line (its interpreter's start-up): from
    its start in /proc (clock ticks since boot) to T0. None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return T0_BOOT - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return None


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(folder, device, validation=5000):
    """Train (minus `validation` examples held out, a fixed split), validation and test
    tensors, resident on `device`."""
    def find(name):
        for candidate in (name + ".gz", name):
            p = os.path.join(folder, candidate)
            if os.path.exists(p):
                return p
        sys.exit("train.py: no %s in %s (give --data, or set TUNE_FASHION_MNIST_DIR)" % (name, folder))

    def images(name):
        x = read_idx(find(name)).to(device=device, dtype=torch.float32)
        return ((x / 255.0 - MEAN) / STD).unsqueeze(1)

    x, y = images("train-images-idx3-ubyte"), read_idx(find("train-labels-idx1-ubyte")).to(device=device, dtype=torch.long)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0)).to(device)
    val, train = order[:validation], order[validation:]
    xt, yt = images("t10k-images-idx3-ubyte"), read_idx(find("t10k-labels-idx1-ubyte")).to(device=device, dtype=torch.long)
    return (x[train], y[train]), (x[val], y[val]), (xt, yt)


class CNN(nn.Module):
    """conv32-pool-conv64-pool-fc128-fc10, as libtune's own CNN."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.f1 = nn.Linear(64 * 7 * 7, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 10))

    def forward(self, x):
        return self.net(x)


def one_epoch(model, opt, x, y, batch):
    """One pass over (x, y) in shuffled minibatches of `batch`: the mean loss (a tensor,
    read once at the end) and the number of minibatches."""
    order = torch.randperm(x.shape[0], device=x.device)
    total, seen = 0.0, 0
    for i in range(0, x.shape[0] - batch + 1, batch):
        idx = order[i:i + batch]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        seen += 1
    return total / max(seen, 1), seen


@torch.no_grad()
def accuracy(model, x, y, batch=4096):
    model.eval()
    right = 0
    for i in range(0, x.shape[0], batch):
        right += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return right / x.shape[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="overrides the configuration's epochs")
    parser.add_argument("--data", default=None, help="the Fashion-MNIST folder")
    args = parser.parse_args()
    cfg = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "batch_size": 128, "model": "cnn", "width": 256,
           "epochs": 3, "seed": 0, "limit_memory": False}
    cfg.update(libtune.config())  # inside a trial: its configuration
    epochs = args.epochs or int(cfg["epochs"])
    torch.manual_seed(int(cfg["seed"]))

    # Exactly the trial's cards: CUDA shows them as 0..k-1 and no other.
    cards = [g for g in libtune.gpus() if not g.logical]
    cuda = torch.cuda.is_available()
    visible = torch.cuda.device_count() if cuda else 0
    if libtune.in_trial() and visible != len(cards):
        sys.exit("train.py: CUDA shows %d device(s), the trial holds %d card(s)" % (visible, len(cards)))
    device_ids = libtune.device_ids() if libtune.in_trial() else list(range(visible))
    device = torch.device("cuda", device_ids[0]) if cuda and device_ids else torch.device("cpu")
    if cfg.get("limit_memory"):
        libtune.limit_torch_memory()  # torch's out-of-memory error instead of the audit's kill
    if device.type == "cuda":
        torch.zeros(1, device=device)  # the CUDA context
        torch.cuda.synchronize(device)
    t_cuda = time.time()
    folder = args.data or os.environ.get("TUNE_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    (xtr, ytr), (xval, yval), (xte, yte) = load(folder, device)
    t_data = time.time()

    net = CNN() if cfg["model"] == "cnn" else MLP(int(cfg["width"]))
    net = net.to(device)
    model = nn.DataParallel(net, device_ids=device_ids) if len(device_ids) > 1 else net
    opt = torch.optim.SGD(net.parameters(), lr=float(cfg["lr"]), momentum=float(cfg["momentum"]),
                          weight_decay=float(cfg["weight_decay"]))
    start = 0
    if libtune.restore_dir():  # started from a checkpoint: go on from there
        state = torch.load(os.path.join(libtune.restore_dir(), "model.pt"), map_location=device)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"]

    batch = int(cfg["batch_size"])
    for epoch in range(start + 1, epochs + 1):
        t_epoch = time.time()
        mean_loss, seen = one_epoch(model, opt, xtr, ytr, batch)
        train_loss = mean_loss.item()
        seconds = time.time() - t_epoch
        metrics = {"val_acc": accuracy(model, xval, yval), "train_loss": train_loss,
                   "samples_per_s": seen * batch / seconds, "epoch": epoch}
        if epoch == start + 1:  # where the start-up went
            metrics.update({"import_torch_s": T_IMPORT - T0, "cuda_context_s": t_cuda - T_IMPORT,
                            "data_s": t_data - t_cuda, "first_epoch_s": seconds, "devices": visible})
            before = interpreter_seconds()
            if before is not None:
                metrics.update({"process_started_at": T0 - before, "interpreter_s": before})
        if epoch == epochs:
            metrics["test_acc"] = accuracy(model, xte, yte)
        if libtune.in_trial():
            folder_ = libtune.checkpoint_dir(epoch)
            torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch},
                       os.path.join(folder_, "model.pt"))
            libtune.report_checkpoint(epoch)
        if not libtune.report(metrics) or libtune.should_stop():
            break


if __name__ == "__main__":
    main()
