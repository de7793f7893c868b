#!/usr/bin/env python3
"""The Python module's overhead: LeNet-5 on Fashion-MNIST, training examples/s of one epoch,
cb-train against the same training through `crossbow` (the Python module) in one run.

  - cb-train on the arrays saved as train.npz + val.npz (the tensor-data path the module uses)
    and on the IDX files (the image path, for reference);
  - Trainer.fit((x, y)) on the same arrays in memory (read in place: no copy);
  - Trainer.fit(iterable) on a Python generator that slices batches of 16 (fetched ahead on a
    thread, the GIL taken per batch).
Same options everywhere (--learners K fixed, so the auto-tuner's noise stays out; --threads T).
Each configuration runs --repeats times; the best run counts. Prints the table and the ratios to
cb-train on the same arrays (the issue's target: fit on arrays >= 0.95).

    PYTHONPATH=build/python /usr/bin/python3 tools/bench/python_api.py [--learners 4] [--repeats 2]
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import crossbow as cb  # noqa: E402

MODEL = os.path.join(ROOT, "models", "lenet5_op17.onnx")
FMNIST = "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(f"{FMNIST}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{FMNIST}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x.astype(np.float32) / 255, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--learners", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    a = ap.parse_args()
    x, y = load("train")
    xv, yv = load("t10k")
    opts = dict(learners=a.learners, threads=a.threads, seed=0, epochs=1)
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        np.savez(os.path.join(d, "train.npz"), x=x, y=y)
        np.savez(os.path.join(d, "val.npz"), x=xv, y=yv)

        def cli(data):
            m = os.path.join(d, "m.jsonl")
            if os.path.exists(m):
                os.remove(m)
            subprocess.run([a.cb_train, MODEL, "--data", data, "--epochs", "1", "--learners",
                            str(a.learners), "--threads", str(a.threads), "--seed", "0",
                            "--metrics", m], check=True, capture_output=True)
            return [json.loads(line) for line in open(m)][-1]["images_per_s"]

        def fit_arrays():
            t = cb.Trainer(MODEL, **opts)
            return t.fit((x, y), validation=(xv, yv))[-1]["images_per_s"]

        def fit_generator():
            def batches():
                for i in range(0, len(x) - 15, 16):
                    yield x[i:i + 16], y[i:i + 16]
            t = cb.Trainer(MODEL, **opts)
            return t.fit(batches(), validation=(xv, yv))[-1]["images_per_s"]

        configs = [("cb-train, arrays (.npz)", lambda: cli(d)),
                   ("cb-train, IDX files", lambda: cli(FMNIST)),
                   ("Python fit((x, y))", fit_arrays),
                   ("Python fit(generator)", fit_generator)]
        for name, run in configs:
            rows[name] = max(run() for _ in range(a.repeats))
            print(f"{name:28s} {rows[name]:9.0f} examples/s", flush=True)
    base = rows["cb-train, arrays (.npz)"]
    print()
    print(f"LeNet-5, {a.learners} learners, {a.threads} threads, batch 16, best of {a.repeats}")
    print("| configuration | examples/s | vs cb-train on the arrays |")
    print("|---|---|---|")
    for name, v in rows.items():
        print(f"| {name} | {v:.0f} | {v / base:.3f} |")


if __name__ == "__main__":
    main()
