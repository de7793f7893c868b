#!/usr/bin/env python3
"""cb-train against PyTorch, images/s of training, one table (tools/gpu/check.sh runs it).

For each (model, batch): PyTorch trains the model on synthetic data preloaded on the device
(SGD lr 0.01 momentum 0.9, cross-entropy, torch.backends.cudnn.benchmark = True, channels-last
tried and kept where faster), timed after a warm-up; cb-train trains the same model (exported
from the same definition, same initial weights) on a data set of the same shape with the learners
its auto-tuner chooses, and its images/s are the tuner's median at the chosen number of learners.
Peak device memory: torch.cuda.max_memory_reserved for PyTorch, nvidia-smi's maximum during the
run for cb-train. On a machine without a GPU (--device cpu) the same runs happen on the CPU with
short lengths: that checks the script, not the speed.

  bench.py --cb-bin DIR --work DIR [--device cuda|cpu] [--configs resnet20:16,resnet50:16]
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import threading
import time
import warnings
import zlib

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
from export_zoo import ResNetCifar  # noqa: E402  (ResNet-20; torchvision-free)


# ---- ResNet-50 without torchvision (torchvision.models.resnet50's layout) ----------------------
class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


MODELS = {"resnet20": (lambda: ResNetCifar(), 32, 10), "resnet50": (ResNet50, 224, 1000)}


def build(name):
    torch.manual_seed(0)
    return MODELS[name][0]()


def export(name, path):
    if os.path.exists(path):
        return
    warnings.filterwarnings("ignore")  # the exporter's notes on BatchNorm's num_batches_tracked
    m = build(name).train()
    size = MODELS[name][1]
    x = torch.randn(2, 3, size, size)
    torch.onnx.export(m, x, path + ".tmp", opset_version=17, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    os.replace(path + ".tmp", path)


# ---- data sets of the right shape (learnable: each class is a colour pattern plus noise) -------
def class_images(n, size, classes, seed):
    base = np.random.default_rng(0).integers(0, 256, (classes, 3, 1, 1))  # the same in every split
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    ramp = np.linspace(0, 1, size)[None, None, :]
    img = base[labels] * (0.5 + 0.5 * ramp[..., None] * (labels % 2)[:, None, None, None])
    img = img + rng.normal(0, 24, (n, 3, size, size))
    return np.clip(img, 0, 255).astype(np.uint8), labels.astype(np.uint8)


def write_cifar(dir_, n_train, n_test):
    if os.path.exists(os.path.join(dir_, "test_batch.bin")):
        return
    os.makedirs(dir_, exist_ok=True)
    for fname, n, seed in (("data_batch_1.bin", n_train, 1), ("test_batch.bin", n_test, 2)):
        img, lab = class_images(n, 32, 10, seed)
        rec = np.concatenate([lab[:, None], img.reshape(n, -1)], axis=1)
        rec.tofile(os.path.join(dir_, fname))


def png_bytes(img):  # img: [3, H, W] uint8 -> PNG (RGB, no filter)
    c, h, w = img.shape
    raw = b"".join(b"\x00" + img[:, y, :].T.tobytes() for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


def write_folder(dir_, n_train, n_test, size, classes=8):
    if os.path.exists(os.path.join(dir_, "done")):
        return
    for split, n, seed in (("train", n_train, 1), ("val", n_test, 2)):
        img, lab = class_images(n, size, classes, seed)
        for i in range(n):
            d = os.path.join(dir_, split, f"class{lab[i]}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"{i}.png"), "wb") as f:
                f.write(png_bytes(img[i]))
    open(os.path.join(dir_, "done"), "w").close()


# ---- PyTorch ----------------------------------------------------------------------------------
def torch_images_per_s(name, batch, device, steps, warmup):
    size, classes = MODELS[name][1], MODELS[name][2]
    results = []
    formats = [torch.contiguous_format, torch.channels_last] if device == "cuda" else \
        [torch.contiguous_format]
    for fmt in formats:
        torch.manual_seed(0)
        m = build(name).to(device).to(memory_format=fmt).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        lossf = nn.CrossEntropyLoss()
        xs = [torch.randn(batch, 3, size, size, device=device).to(memory_format=fmt)
              for _ in range(4)]
        ys = [torch.randint(0, classes, (batch,), device=device) for _ in range(4)]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        def step(i):
            opt.zero_grad(set_to_none=True)
            lossf(m(xs[i % 4]), ys[i % 4]).backward()
            opt.step()
        for i in range(warmup):
            step(i)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        if device == "cuda":
            torch.cuda.synchronize()
        ips = steps * batch / (time.perf_counter() - t0)
        peak = torch.cuda.max_memory_reserved() if device == "cuda" else 0
        results.append((ips, peak, "channels-last" if fmt == torch.channels_last else "NCHW"))
        del m, opt, xs, ys
        if device == "cuda":
            torch.cuda.empty_cache()
    return max(results)


# ---- cb-train ---------------------------------------------------------------------------------
class GpuMemoryPeak:
    """Polls nvidia-smi's used memory of GPU 0 while a run lasts (0 without nvidia-smi)."""

    def __init__(self, active):
        self.peak, self.active, self.stop = 0, active, False
        self.base = self.sample() if active else 0

    def sample(self):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                                  "nounits", "-i", "0"], capture_output=True, text=True, timeout=5)
            return int(out.stdout.strip().splitlines()[0]) * (1 << 20)
        except Exception:
            return 0

    def __enter__(self):
        if self.active:
            self.t = threading.Thread(target=self.loop, daemon=True)
            self.t.start()
        return self

    def loop(self):
        while not self.stop:
            self.peak = max(self.peak, self.sample())
            time.sleep(0.2)

    def __exit__(self, *a):
        self.stop = True
        if self.active:
            self.t.join()


def cb_images_per_s(cb_bin, model, data, batch, devices, steps, extra, log):
    metrics = log + ".jsonl"
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [os.path.join(cb_bin, "cb-train"), model, "--data", data, "--devices", devices,
           "--batch-size", str(batch), "--steps", str(steps), "--lr", "0.01", "--augment", "none", "--test-limit", "256", "--evals-per-epoch", "1",
           "--metrics", metrics] + extra
    if "--learners" not in extra:
        cmd += ["--learners", "auto"]
    with GpuMemoryPeak(devices.startswith("cuda")) as mem, open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"cb-train failed ({rc}): {' '.join(cmd)}\n" + open(log).read()[-3000:])
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    tune = [r for r in recs if r["type"] == "tune"]
    summary = [r for r in recs if r["type"] == "summary"][-1]
    learners = tune[-1]["learners"] if tune else summary.get("learners_per_device", 1)
    at = [r["images_per_s"] for r in tune if r["measured"] == learners]
    ips = max(at) if at else summary["images_per_s"]
    return ips, max(0, mem.peak - mem.base), learners


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cb-bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", default="resnet20:16,resnet20:32,resnet20:64,resnet50:16,"
                    "resnet50:32")
    ap.add_argument("--steps", default="resnet20:3000,resnet50:1200",
                    help="cb-train steps per model (the auto-tuner needs ~270 per learner count)")
    ap.add_argument("--torch-steps", type=int, default=200)
    ap.add_argument("--extra", default="", help="more cb-train options")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    steps = dict((k, int(v)) for k, v in (s.split(":") for s in a.steps.split(",")))
    devices = "cuda:0" if a.device == "cuda" else "cpu"
    if a.device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    rows = []
    for cfg in a.configs.split(","):
        name, batch = cfg.split(":")
        batch = int(batch)
        model = os.path.join(a.work, f"{name}.onnx")
        export(name, model)
        if name == "resnet20":
            data = os.path.join(a.work, "cifar")
            write_cifar(data, 10000, 512)
        else:
            data = os.path.join(a.work, "folder224")
            write_folder(data, 1024 if a.device == "cuda" else 64, 64, 224)
        extra = a.extra.split() if a.extra else []
        if name == "resnet50":
            extra += ["--cache", os.path.join(a.work, "folder224.pack"), "--image-size", "224x224"]
        t_ips, t_mem, t_fmt = torch_images_per_s(name, batch, a.device, a.torch_steps,
                                                 max(5, a.torch_steps // 10))
        c_ips, c_mem, k = cb_images_per_s(a.cb_bin, model, data, batch, devices, steps[name],
                                          extra, os.path.join(a.work, f"cb-{name}-{batch}.log"))
        rows.append((name, batch, t_ips, t_fmt, t_mem, c_ips, k, c_mem))
        print(f"  {name} batch {batch}: PyTorch {t_ips:.0f} images/s ({t_fmt}), cb-train "
              f"{c_ips:.0f} images/s ({k} learners)", flush=True)
    gib = float(1 << 30)
    print()
    if a.device == "cpu":
        print("(on the CPU with short runs: this checks the script, it does not measure speed)")
    print(f"| model | batch | PyTorch images/s | cb-train images/s | ratio | cb learners/GPU "
          f"| PyTorch peak GiB | cb peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, batch, t_ips, t_fmt, t_mem, c_ips, k, c_mem in rows:
        print(f"| {name} | {batch} | {t_ips:.0f} ({t_fmt}) | {c_ips:.0f} | {c_ips / t_ips:.2f}x "
              f"| {k} | {t_mem / gib:.2f} | {c_mem / gib:.2f} |")


if __name__ == "__main__":
    main()
