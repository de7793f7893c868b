#!/usr/bin/env python3
"""cb-run vs PyTorch inference latency, side by side in one run.

For each model, batch size and thread count: PyTorch (eval mode, torch.set_num_threads(T), the
fair configuration of models/torch_reference.py: OPENBLAS_NUM_THREADS=1 and no malloc trimming)
and `cb-run --time --eval-mode` (inference mode, --threads T) are timed alternately, several rounds, and the
medians are compared. Prints a table with the ratio PyTorch / crossbow (> 1: crossbow faster).

Run with Debian's torch:  /usr/bin/python3 tools/bench/bench_inference.py [--models lenet5,resnet20]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "models"))
import torch_reference as ref  # noqa: E402

ref.fair_env()
import torch  # noqa: E402
import export_zoo  # noqa: E402


def torch_latency(model, x, iters):
    with torch.no_grad():
        model(x)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def cb_latency(cb_run, onnx_path, batch, threads, iters):
    out = subprocess.run([cb_run, onnx_path, "--input", "input=random", "--batch-size", str(batch),
                          "--threads", str(threads), "--time", str(iters), "--eval-mode"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("cb-run failed: " + out.stderr.strip())
    m = re.search(r"median ([0-9.]+) ms", out.stdout)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,lenet5,resnet20,transformer,resnet18")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per configuration")
    ap.add_argument("--cb-run", default=os.path.join(ROOT, "build", "cb-run"))
    args = ap.parse_args()

    rows = []
    print("%-12s %5s %7s %12s %12s %8s" % ("model", "batch", "threads", "pytorch ms",
                                         "crossbow ms", "ratio"))
    for name in args.models.split(","):
        onnx_path = os.path.join(ROOT, "models", "%s_op17.onnx" % name)
        if not os.path.exists(onnx_path):
            print("%-12s skipped: %s not generated" % (name, onnx_path))
            continue
        model = export_zoo.build(name)
        model.eval()
        _, shape, dtype, _ = export_zoo.ZOO[name]
        for batch in map(int, args.batches.split(",")):
            if dtype == torch.int64:
                x = torch.randint(0, 10, (batch,) + shape)
            else:
                x = torch.randn((batch,) + shape)
            for threads in map(int, args.threads.split(",")):
                torch.set_num_threads(threads)
                # Enough iterations for ~0.3 s per measurement.
                probe = torch_latency(model, x, 3)
                iters = max(5, min(500, int(300 / max(probe, 0.01))))
                pt, cb = [], []
                for _ in range(args.rounds):
                    pt.append(torch_latency(model, x, iters))
                    cb.append(cb_latency(args.cb_run, onnx_path, batch, threads, iters))
                p, c = statistics.median(pt), statistics.median(cb)
                rows.append((name, batch, threads, p, c))
                print("%-12s %5d %7d %12.3f %12.3f %7.2fx" % (name, batch, threads, p, c, p / c),
                      flush=True)
    if rows:
        ratios = [r[3] / r[4] for r in rows]
        print("geometric mean ratio (pytorch / crossbow): %.2fx" %
              statistics.geometric_mean(ratios))


if __name__ == "__main__":
    main()
