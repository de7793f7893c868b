#!/usr/bin/env python3
"""crossbow against PyTorch on real models' training throughput, in one run, with the machine's peak.

For each model (ResNet-18, ResNet-50, MobileNetV2, ResNet-20) and batch size (16, 32), training
images/s of:
  - PyTorch f32: torchvision's model (models/export_zoo.py, the same architecture as our ONNX
    files), SGD momentum 0.9, cross-entropy, synthetic data; NCHW and channels-last both timed,
    the faster kept (the table names which);
  - PyTorch autocast bf16: the same under torch.autocast("cpu", torch.bfloat16) (the faster
    layout again); "fails" with the reason where PyTorch cannot run it;
  - crossbow f32 and bf16: cb-train on the same synthetic data (a .npz), one learner (the
    configuration PyTorch has), `--precision f32 / bf16`, images/s from its --metrics records
    after the warm-up steps.
Then the ratios crossbow / PyTorch, and each as a fraction of the machine's peak: training FLOPs
(3x the forward's multiply-adds x 2, counted on the PyTorch model) x images/s / the f32 or bf16
matmul peak that cb-bench-gemm measures in the same run. Runs are interleaved per model and
batch, --repeats times, and medians reported (the machines are noisy: compare ratios from one
run, never absolute numbers across runs).

    /usr/bin/python3 tools/bench/real_models.py [--models resnet18,resnet50,mobilenet_v2,resnet20]
        [--batches 16,32] [--threads 2] [--steps 6] [--seconds 6] [--warmup 2] [--repeats 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import torch_reference as ref  # noqa: E402

ref.fair_env()
import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_zoo  # noqa: E402

NAMES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2",
         "resnet20": "ResNet-20"}


def train_flops(name):
    """Training FLOPs per image: 3 x the forward's multiply-adds x 2 (Conv and Linear only)."""
    model = export_zoo.build(name)
    macs = [0]

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            macs[0] += out.numel() // out.shape[0] * k
        elif isinstance(mod, torch.nn.Linear):
            macs[0] += out.numel() // out.shape[0] * mod.in_features

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model.eval()
        model(export_zoo.dummy_input(name)[:1])
    return 3 * 2 * macs[0]


def torch_images_per_s(name, batch, steps, warmup, bf16, channels_last):
    model = export_zoo.build(name)
    _, shape, _, classes = export_zoo.ZOO[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn((batch,) + shape, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * steps / (time.perf_counter() - t0)


def write_data(name, batch, folder):
    """A .npz of 4 batches of synthetic examples (cb-train cycles over it)."""
    _, shape, _, classes = export_zoo.ZOO[name]
    rng = np.random.default_rng(0)
    n = 4 * batch
    for split in ("train", "val"):
        np.savez(os.path.join(folder, split + ".npz"),
                 input=rng.standard_normal((n,) + shape, dtype=np.float32),
                 y=rng.integers(0, classes, n).astype(np.int64))


def cb_images_per_s(args, name, batch, data, precision, steps, tmp):
    """cb-train's training images/s over the steps after the warm-up (its --metrics records)."""
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    # Evaluations every `steps` steps: the first record's interval is the warm-up (first steps,
    # caches, the pipeline filling), the second's images/s covers exactly the measured steps.
    every, total = steps, 2 * steps
    cmd = [args.cb_train, os.path.join(ROOT, "models", f"{name}_op17.onnx"), "--data", data,
           "--batch-size", str(batch), "--steps", str(total), "--eval-every", str(every),
           "--learners", "1", "--ema", "off", "--threads", str(args.threads),
           "--metrics", metrics, "--eval-batch-size", str(batch)]
    if precision != "f32":
        cmd += ["--precision", precision]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {r.returncode}"
    recs = [json.loads(line) for line in open(metrics) if line.strip()]
    rates = [rec["images_per_s"] for rec in recs if "images_per_s" in rec][1:]
    if not rates:
        return None, "no records after the warm-up"
    return statistics.median(rates), None


def peak(args):
    r = subprocess.run([args.cb_bench_gemm, "--threads", str(args.threads)], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


def fmt(v):
    return "-" if v is None else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,resnet20")
    ap.add_argument("--batches", default="16,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per configuration, at least")
    ap.add_argument("--seconds", type=float, default=6,
                    help="more steps where --steps take less than this (PyTorch f32's time)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-bf16", action="store_true", help="f32 only (both sides)")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("--cb-bench-gemm", default=os.path.join(ROOT, "build", "cb-bench-gemm"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    pk = peak(args)
    print(f"peak ({args.threads} threads, oneDNN matmul {pk['size']}^3): f32 "
          f"{pk['f32_gflops']} GFLOP/s, bf16 {pk['bf16_gflops']} GFLOP/s", flush=True)
    rows = []
    tmp = tempfile.mkdtemp(prefix="cb_real_models_")
    for name in args.models.split(","):
        flops = train_flops(name)
        for batch in (int(b) for b in args.batches.split(",")):
            data = os.path.join(tmp, f"{name}_{batch}")
            os.makedirs(data, exist_ok=True)
            write_data(name, batch, data)
            runs = {}
            notes = {}

            def record(key, value, note=None):
                runs.setdefault(key, [])
                if value is not None:
                    runs[key].append(value)
                if note:
                    notes[key] = note

            # Steps per measurement: --steps, or more where that is under --seconds of PyTorch f32.
            ips = torch_images_per_s(name, batch, 2, 1, False, False)
            steps = max(args.steps, round(args.seconds * ips / batch))
            for _ in range(args.repeats):
                for cl in (False, True):
                    record(f"torch f32 {'cl' if cl else 'nchw'}",
                           torch_images_per_s(name, batch, steps, args.warmup, False, cl))
                    if not args.no_bf16:
                        try:
                            v = torch_images_per_s(name, batch, steps, args.warmup, True, cl)
                            record(f"torch bf16 {'cl' if cl else 'nchw'}", v)
                        except Exception as e:  # noqa: BLE001 (PyTorch's own failure, reported)
                            record(f"torch bf16 {'cl' if cl else 'nchw'}", None,
                                   str(e).splitlines()[0][:80])
                for prec in ("f32",) if args.no_bf16 else ("f32", "bf16"):
                    v, err = cb_images_per_s(args, name, batch, data, prec, steps, tmp)
                    record(f"cb {prec}", v, err)

            def med(key):
                return statistics.median(runs[key]) if runs.get(key) else None

            def best(prefix):
                a, b = med(prefix + " nchw"), med(prefix + " cl")
                if a is None and b is None:
                    return None, notes.get(prefix + " nchw", "")
                if b is not None and (a is None or b > a):
                    return b, "channels-last"
                return a, "NCHW"

            tf, tf_how = best("torch f32")
            tb, tb_how = best("torch bf16") if not args.no_bf16 else (None, "")
            cf, cb16 = med("cb f32"), med("cb bf16")
            row = dict(model=NAMES.get(name, name), batch=batch, torch_f32=tf, torch_f32_how=tf_how,
                       torch_bf16=tb, torch_bf16_how=tb_how, cb_f32=cf, cb_bf16=cb16,
                       cb_f32_note=notes.get("cb f32"), cb_bf16_note=notes.get("cb bf16"),
                       gflop_per_image=flops / 1e9)
            rows.append(row)
            print(json.dumps(row), flush=True)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    def frac(v, g):
        return f"{100 * v / g:.0f}%" if v and g else "-"

    f32_peak, bf16_peak = pk["f32_gflops"], pk["bf16_gflops"]
    print(f"\n| model | batch | PyTorch f32 | PyTorch bf16 | crossbow f32 | crossbow bf16 | "
          f"f32 ratio | bf16 / PyTorch f32 | bf16 / PyTorch bf16 | crossbow f32 % of peak | "
          f"crossbow bf16 % of bf16 peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        g = r["gflop_per_image"]
        tb = (fmt(r["torch_bf16"]) + f" ({r['torch_bf16_how']})" if r["torch_bf16"] else
              f"fails ({r['torch_bf16_how']})" if r["torch_bf16_how"] else "-")
        print(f"| {r['model']} | {r['batch']} | {fmt(r['torch_f32'])} ({r['torch_f32_how']}) | "
              f"{tb} | {fmt(r['cb_f32'])} | {fmt(r['cb_bf16'])} | "
              f"{ratio(r['cb_f32'], r['torch_f32'])} | {ratio(r['cb_bf16'], r['torch_f32'])} | "
              f"{ratio(r['cb_bf16'], r['torch_bf16'])} | "
              f"{frac(r['cb_f32'] and r['cb_f32'] * g, f32_peak)} | "
              f"{frac(r['cb_bf16'] and r['cb_bf16'] * g, bf16_peak)} |")
    for r in rows:
        for k in ("cb_f32_note", "cb_bf16_note"):
            if r[k]:
                print(f"note: {r['model']} batch {r['batch']} {k[:-5]}: {r[k]}")


if __name__ == "__main__":
    main()
