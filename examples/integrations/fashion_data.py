"""Fashion-MNIST's IDX files as tensors, for the integration examples beside this file
(the data: Debian's dataset-fashion-mnist, or $TUNE_FASHION_MNIST_DIR, or the config's
data_dir). `limit` keeps the first examples only (a quick run on a CPU)."""
import gzip
import os
import struct

import torch

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def folder(config):
    return (config.get("data_dir") or os.environ.get("TUNE_FASHION_MNIST_DIR")
            or "/usr/share/datasets/fashion-mnist")


def split(config, limit=None, validation=5000):
    """(train_x, train_y), (val_x, val_y): images normalized as float32 [N, 784]."""
    base = folder(config)

    def find(name):
        for candidate in (name + ".gz", name):
            if os.path.exists(os.path.join(base, candidate)):
                return os.path.join(base, candidate)
        raise SystemExit(f"no {name} in {base}: give data_dir in the space, or set TUNE_FASHION_MNIST_DIR")

    x = (read_idx(find("train-images-idx3-ubyte")).float() / 255.0 - MEAN) / STD
    y = read_idx(find("train-labels-idx1-ubyte")).long()
    x = x.reshape(x.shape[0], -1)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
    val, train = order[:validation], order[validation:]
    if limit:
        val, train = val[:limit // 5], train[:limit]
    return (x[train], y[train]), (x[val], y[val])
