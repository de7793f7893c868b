#!/usr/bin/env python3
"""cb-train against PyTorch, images/s of training, one table (tools/gpu/check.sh runs it).

For each (model, batch): PyTorch trains the model on synthetic data preloaded on the device
(SGD lr 0.01 momentum 0.9, cross-entropy, torch.backends.cudnn.benchmark = True, channels-last
tried and kept where faster), timed after a warm-up; cb-train trains the same model (exported
from the same definition, same initial weights, with the legacy TorchScript exporter: dynamo=False
where this torch knows the argument, opset 17) on a data set of the same shape, with a fixed number
of learners (the short first-run profile, the default) or the learners its auto-tuner chooses
(--full: its images/s are then the tuner's best at the chosen number of learners).
TF32 is the same on both sides and stated with the table: off by default (PyTorch's cuDNN and
matmul TF32 switches turned off); with --tf32 on, both PyTorch switches on and cb-train --tf32.
Peak device memory: torch.cuda.max_memory_reserved for PyTorch, nvidia-smi's maximum during the
run for cb-train. On a machine without a GPU (--device cpu) the same runs happen on the CPU with
short lengths: that checks the script, not the speed. --time-limit S stops starting new runs
(and stops a cb-train run) when S seconds have passed; the table then holds the finished rows.

--precision bf16 compares cb-train --precision bf16 with PyTorch's bf16 autocast.

  bench.py --cb-bin DIR --work DIR [--logs DIR] [--device cuda|cpu] [--full] [--tf32 on|off]
           [--precision f32|bf16] [--configs resnet20:32,resnet50:32] [--time-limit S]
"""
import inspect
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
    torch.onnx.export(m, x, path + ".tmp", **export_kwargs())
    check_opset(path + ".tmp", 17)
    os.replace(path + ".tmp", path)


def export_kwargs():
    """torch.onnx.export's arguments: the legacy (TorchScript) exporter, train mode, opset 17.
    torch >= 2.9 defaults to the dynamo exporter (other opsets, training-mode and dynamic-axes
    handling): pin dynamo=False where this torch knows the argument (1.13 does not)."""
    kw = dict(opset_version=17, input_names=["input"], output_names=["logits"],
              dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw["dynamo"] = False
    return kw


def check_opset(path, want):
    """The default-domain opset of the exported file must be `want` (skipped without onnx)."""
    try:
        import onnx
    except ImportError:
        return
    m = onnx.load(path, load_external_data=False)
    got = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if got != [want]:
        sys.exit(f"bench: {path}: exported with opset {got}, expected [{want}]")


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
def set_torch_tf32(on):
    """TF32 for PyTorch's convolutions and matmuls (cuDNN's switch defaults to on): as cb-train."""
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on
    return torch.backends.cudnn.allow_tf32 == on and torch.backends.cuda.matmul.allow_tf32 == on


def torch_images_per_s(name, batch, device, steps, warmup, bf16=False):
    size, classes = MODELS[name][1], MODELS[name][2]
    if device == "cuda":
        torch.backends.cudnn.benchmark = True  # autotuned convolution algorithms, as promised
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
            # bf16: PyTorch's mixed precision, autocast (bf16 convolutions and matmuls, f32 weights).
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
                loss = lossf(m(xs[i % 4]), ys[i % 4])
            loss.backward()
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


def cb_images_per_s(cb_bin, model, data, batch, devices, steps, extra, log, timeout):
    metrics = log + ".jsonl"
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [os.path.join(cb_bin, "cb-train"), model, "--data", data, "--devices", devices,
           "--batch-size", str(batch), "--steps", str(steps), "--lr", "0.01", "--augment", "none", "--test-limit", "256", "--evals-per-epoch", "1",
           "--metrics", metrics] + extra
    if "--learners" not in extra:
        cmd += ["--learners", "auto"]
    with GpuMemoryPeak(devices.startswith("cuda")) as mem, open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return None
    if rc != 0:
        sys.exit(f"bench: cb-train failed ({rc}): {' '.join(cmd)}\n" + open(log).read()[-3000:])
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    tune = [r for r in recs if r["type"] == "tune"]
    summary = [r for r in recs if r["type"] == "summary"][-1]
    learners = tune[-1]["learners"] if tune else summary.get("learners_per_device", 1)
    at = [r["images_per_s"] for r in tune if r["measured"] == learners]
    ips = max(at) if at else summary["images_per_s"]
    return ips, max(0, mem.peak - mem.base), learners


# The first run's short profile (fits check.sh's few minutes) and the long one (--full).
SHORT = dict(configs="resnet20:32,resnet50:32", steps="resnet20:300,resnet50:60", torch_steps=30,
             learners="2")
FULL = dict(configs="resnet20:16,resnet20:32,resnet20:64,resnet50:16,resnet50:32",
            steps="resnet20:3000,resnet50:1200", torch_steps=200, learners="auto")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cb-bin", required=True)
    ap.add_argument("--work", required=True, help="models and data sets")
    ap.add_argument("--logs", help="cb-train's logs and metrics (default: --work)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--full", action="store_true",
                    help="the long profile: 5 configurations, the auto-tuner, 200 PyTorch steps")
    ap.add_argument("--configs", help=f"model:batch,... (short: {SHORT['configs']})")
    ap.add_argument("--steps", help="cb-train steps per model (the auto-tuner needs ~270 per "
                    f"learner count; short: {SHORT['steps']})")
    ap.add_argument("--torch-steps", type=int)
    ap.add_argument("--learners", help="cb-train --learners (short: 2; --full: auto)")
    ap.add_argument("--tf32", choices=["on", "off"], default="off",
                    help="TF32 on both sides (PyTorch's switches and cb-train --tf32) or neither")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="bf16: cb-train --precision bf16 against PyTorch's bf16 autocast")
    ap.add_argument("--time-limit", type=float, default=0, help="seconds (0: none)")
    ap.add_argument("--extra", default="", help="more cb-train options")
    a = ap.parse_args()
    prof = FULL if a.full else SHORT
    configs = a.configs or prof["configs"]
    steps_arg = a.steps or prof["steps"]
    torch_steps = a.torch_steps or prof["torch_steps"]
    learners = a.learners or prof["learners"]
    logs = a.logs or a.work
    t_start = time.monotonic()

    def left():
        return a.time_limit - (time.monotonic() - t_start) if a.time_limit > 0 else None

    os.makedirs(a.work, exist_ok=True)
    os.makedirs(logs, exist_ok=True)
    steps = dict((k, int(v)) for k, v in (s.split(":") for s in steps_arg.split(",")))
    devices = "cuda:0" if a.device == "cuda" else "cpu"
    if a.device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    tf32 = a.tf32 == "on"
    if not set_torch_tf32(tf32):
        sys.exit("bench: PyTorch's TF32 switches did not take the value asked for")
    tf32_line = (f"TF32: {'on' if tf32 else 'off'} on both sides (PyTorch cudnn.allow_tf32="
                 f"{torch.backends.cudnn.allow_tf32}, cuda.matmul.allow_tf32="
                 f"{torch.backends.cuda.matmul.allow_tf32}; cb-train "
                 f"{'--tf32' if tf32 else 'without --tf32'}); cudnn.benchmark "
                 f"{'on' if a.device == 'cuda' else 'n/a (CPU)'}; precision "
                 f"{'bf16 (cb-train --precision bf16, PyTorch autocast bf16)' if a.precision == 'bf16' else 'f32'}; torch "
                 f"{torch.__version__}, exporter {'dynamo=False' if 'dynamo' in export_kwargs() else 'legacy (default)'}")
    print(tf32_line, flush=True)
    rows, skipped = [], []
    for cfg in configs.split(","):
        name, batch = cfg.split(":")
        batch = int(batch)
        if left() is not None and left() < 20:
            skipped.append(cfg)
            continue
        model = os.path.join(a.work, f"{name}.onnx")
        export(name, model)
        if name == "resnet20":
            data = os.path.join(a.work, "cifar")
            write_cifar(data, 10000, 512)
        else:
            data = os.path.join(a.work, "folder224")
            write_folder(data, 1024 if a.device == "cuda" else 64, 64, 224)
        extra = a.extra.split() if a.extra else []
        if "--learners" not in extra:
            extra += ["--learners", learners]
        if tf32:
            extra += ["--tf32"]
        if a.precision == "bf16":
            extra += ["--precision", "bf16"]
        if name == "resnet50":
            extra += ["--cache", os.path.join(a.work, "folder224.pack"), "--image-size", "224x224"]
        t_ips, t_mem, t_fmt = torch_images_per_s(name, batch, a.device, torch_steps,
                                                 max(5, torch_steps // 10), a.precision == "bf16")
        res = cb_images_per_s(a.cb_bin, model, data, batch, devices, steps[name], extra,
                              os.path.join(logs, f"cb-{name}-{batch}.log"),
                              None if left() is None else max(1.0, left() - 5))
        if res is None:
            print(f"bench: cb-train {name} batch {batch} stopped at the time limit", flush=True)
            skipped.append(cfg)
            continue
        c_ips, c_mem, k = res
        rows.append((name, batch, t_ips, t_fmt, t_mem, c_ips, k, c_mem))
        print(f"  {name} batch {batch}: PyTorch {t_ips:.0f} images/s ({t_fmt}), cb-train "
              f"{c_ips:.0f} images/s ({k} learners)", flush=True)
    gib = float(1 << 30)
    print()
    if a.device == "cpu":
        print("(on the CPU with short runs: this checks the script, it does not measure speed)")
    print(tf32_line)
    print(f"| model | batch | PyTorch images/s | cb-train images/s | ratio | cb learners/GPU "
          f"| PyTorch peak GiB | cb peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, batch, t_ips, t_fmt, t_mem, c_ips, k, c_mem in rows:
        print(f"| {name} | {batch} | {t_ips:.0f} ({t_fmt}) | {c_ips:.0f} | {c_ips / t_ips:.2f}x "
              f"| {k} | {t_mem / gib:.2f} | {c_mem / gib:.2f} |")
    if skipped:
        print(f"bench: not measured (time limit): {', '.join(skipped)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
