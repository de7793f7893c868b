#!/usr/bin/env python3
"""A CIFAR-10-shaped data set made from Fashion-MNIST, for tests and experiments (ResNet-20 etc.)
where no CIFAR download is available.

Reads the gzip IDX files of Fashion-MNIST (Debian's dataset-fashion-mnist:
/usr/share/datasets/fashion-mnist) and writes the CIFAR-10 binary version's files:
data_batch_1.bin ... data_batch_K.bin and test_batch.bin, each record 1 label byte + 3072 pixel
bytes (1024 R, 1024 G, 1024 B, row-major 32x32), plus batches.meta.txt (the class names).

  - the first N training / M test examples, in file order; labels unchanged (0-9);
  - each 28x28 image padded to 32x32 with 2 pixels of zeros on every side, in every channel;
  - three different channels, inside the 28x28 area (x = the Fashion-MNIST byte):
      R = x,  G = x * 4 // 5 (80%, rounded down),  B = 255 - x (inverted);
    the padding stays 0 in all three;
  - the training examples split over K = clamp(N // 1000, 1, 5) files of (nearly) equal size
    (10000 -> 5 files of 2000, as CIFAR's 5 files of 10000; 2500 -> 2 files; 100 -> 1 file).

The output folder is written under DIR.tmp and renamed to DIR at the end, so DIR exists only when
complete. numpy only: /usr/bin/python3 models/make_cifar_shaped.py --out DIR [--train N] [--test M]
"""
import argparse
import gzip
import os
import shutil
import sys

import numpy as np

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]


def read_idx(path, ndims):
    with gzip.open(path, "rb") as f:
        b = f.read()
    if len(b) < 4 + 4 * ndims or b[:4] != bytes([0, 0, 8, ndims]):
        sys.exit(f"{path}: not an IDX file of unsigned bytes with {ndims} dims")
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    data = np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * ndims)
    if data.size != int(np.prod(dims)):
        sys.exit(f"{path}: {data.size} bytes of data, the header says {dims}")
    return data.reshape(dims)


def records(images, labels):
    """[n,28,28] u8, [n] u8 -> [n, 3073] u8 CIFAR-10 records."""
    n = images.shape[0]
    x = images.astype(np.int32)
    planes = np.zeros((n, 3, 32, 32), dtype=np.uint8)
    planes[:, 0, 2:30, 2:30] = x
    planes[:, 1, 2:30, 2:30] = x * 4 // 5
    planes[:, 2, 2:30, 2:30] = 255 - x
    out = np.empty((n, 1 + 3 * 32 * 32), dtype=np.uint8)
    out[:, 0] = labels
    out[:, 1:] = planes.reshape(n, -1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (must not exist)")
    ap.add_argument("--train", type=int, default=10000, help="training examples (first N)")
    ap.add_argument("--test", type=int, default=2000, help="test examples (first M)")
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist",
                    help="folder with Fashion-MNIST's gzip IDX files")
    a = ap.parse_args()

    def load(prefix):
        return (read_idx(os.path.join(a.fashion, f"{prefix}-images-idx3-ubyte.gz"), 3),
                read_idx(os.path.join(a.fashion, f"{prefix}-labels-idx1-ubyte.gz"), 1))

    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    if not 1 <= a.train <= len(train_y):
        sys.exit(f"--train must be in 1..{len(train_y)}, got {a.train}")
    if not 1 <= a.test <= len(test_y):
        sys.exit(f"--test must be in 1..{len(test_y)}, got {a.test}")
    if os.path.exists(a.out):
        sys.exit(f"{a.out} exists; remove it first")

    tmp = a.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    train = records(train_x[:a.train], train_y[:a.train])
    files = min(max(a.train // 1000, 1), 5)
    for i, part in enumerate(np.array_split(train, files)):
        part.tofile(os.path.join(tmp, f"data_batch_{i + 1}.bin"))
    records(test_x[:a.test], test_y[:a.test]).tofile(os.path.join(tmp, "test_batch.bin"))
    with open(os.path.join(tmp, "batches.meta.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    os.rename(tmp, a.out)
    print(f"wrote {a.out}: {a.train} training examples in {files} data_batch files, "
          f"{a.test} test examples (Fashion-MNIST as 3x32x32 CIFAR-10 records)")


if __name__ == "__main__":
    main()
