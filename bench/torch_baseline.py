#!/usr/bin/env python3
"""PyTorch eager baseline for bench_train: the same models, data, split, initialisation
scheme, optimiser and learning-rate schedule as libtune's trainer (libtune/tune/train/),
timed the same way (training steps only, data resident on the GPU).

Prints one line per epoch, then a JSON line:
{"model", "test_acc", "val_acc", "samples_per_s", "seconds", "device"}.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # as libtune/tune/train/data.hpp
MASK = (1 << 64) - 1


def read_idx(path, magic):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if struct.unpack(">I", data[:4])[0] != magic:
        sys.exit(f"torch_baseline: {path} is not an IDX file with magic {magic:#010x}")
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(dirname, name):
    p = os.path.join(dirname, name)
    return p + ".gz" if os.path.exists(p + ".gz") else p


def permutation(n, seed):
    """libtune's permutation(): Fisher-Yates on splitmix64 (tune/train/rng.hpp)."""
    state = seed & MASK
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        j = (z * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


def load(dirname, validation=5000, split_seed=0):
    x = read_idx(find(dirname, "train-images-idx3-ubyte"), 0x803)
    y = read_idx(find(dirname, "train-labels-idx1-ubyte"), 0x801)
    xt = read_idx(find(dirname, "t10k-images-idx3-ubyte"), 0x803)
    yt = read_idx(find(dirname, "t10k-labels-idx1-ubyte"), 0x801)
    held = np.zeros(len(x), dtype=bool)
    held[permutation(len(x), split_seed ^ 0x5EED5EED)[:validation]] = True
    return (x[~held], y[~held]), (x[held], y[held]), (xt, yt)


def mlp(width, depth):
    layers, features = [], 784
    for _ in range(depth):
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    layers.append(nn.Linear(features, 10))
    return nn.Sequential(nn.Flatten(), *layers)


def cnn(width):
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, width), nn.ReLU(), nn.Linear(width, 10))


def init(model):
    """He normal (fan_in) for hidden layers, N(0, 1/fan_in) for the last, zero biases."""
    mods = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    for i, m in enumerate(mods):
        fan_in = m.weight[0].numel()
        gain = 1.0 if i == len(mods) - 1 else 2.0
        nn.init.normal_(m.weight, 0.0, math.sqrt(gain / fan_in))
        nn.init.zeros_(m.bias)


def to_device(images, labels, dev, shape):
    x = torch.from_numpy(images.copy()).to(dev).float().div_(255.0).sub_(MEAN).div_(STD)
    return x.reshape(shape), torch.from_numpy(labels.astype(np.int64)).to(dev)


@torch.no_grad()
def accuracy(model, x, y, batch=1024):
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 (default: fp32, like libtune)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--data", default=os.environ.get("TUNE_FASHION_MNIST_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    start = time.perf_counter()
    train, val, test = load(a.data)
    shape = (-1, 784) if a.model == "mlp" else (-1, 1, 28, 28)
    xtr, ytr = to_device(*train, dev, shape)
    xva, yva = to_device(*val, dev, shape)
    xte, yte = to_device(*test, dev, shape)
    width = a.width or (128 if a.model == "cnn" else 512)
    model = (mlp(width, a.depth) if a.model == "mlp" else cnn(width)).to(dev)
    init(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    n = len(xtr)
    train_seconds, val_acc = 0.0, 0.0
    for epoch in range(a.epochs):
        for g in opt.param_groups:  # libtune's cosine schedule, per epoch
            g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * epoch / a.epochs))
        sync()
        t0 = time.perf_counter()
        order = torch.randperm(n, device=dev)
        loss_sum = torch.zeros((), device=dev)
        for i in range(0, n, a.batch_size):
            idx = order[i:i + a.batch_size]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * len(idx)
        sync()
        dt = time.perf_counter() - t0
        train_seconds += dt
        val_acc = accuracy(model, xva, yva)
        print(f"epoch {epoch + 1}  train_loss {loss_sum.item() / n:.4f}  val_acc {val_acc:.4f}  "
              f"{n / dt:.0f} samples/s  at {time.time():.3f}", flush=True)
    test_acc = accuracy(model, xte, yte)
    print(json.dumps({"model": a.model, "device": str(dev), "test_acc": test_acc, "val_acc": val_acc,
                      "samples_per_s": n * a.epochs / train_seconds,
                      "seconds": time.perf_counter() - start}), flush=True)


if __name__ == "__main__":
    main()
