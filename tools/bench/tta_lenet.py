#!/usr/bin/env python3
"""Time to accuracy and training throughput: `cb-train --learners auto` vs PyTorch, in one run.

LeNet-5 on Fashion-MNIST, batch 16, SGD lr 0.01 momentum 0.9, same initial weights (the ONNX
file's), data preloaded on both sides, 2 threads each (PyTorch in the fair configuration of
models/torch_reference.py). Both train until the test accuracy (all 10,000 images, evaluated every
quarter epoch) reaches --target (default 0.89) or --max-epochs pass. Prints the time to the target
of each (wall time from the start, evaluations included on both sides), the training throughput
of each (evaluation excluded), their ratios (targets: time ratio <= 0.5, throughput ratio >= 2),
and the learners the auto-tuner chose.

    /usr/bin/python3 tools/bench/tta_lenet.py [--target 0.89] [--max-epochs 8] [--learners auto]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import torch_reference as ref  # noqa: E402

ref.fair_env()
import torch  # noqa: E402

DATA = ref.FASHION_MNIST
MODEL = os.path.join(ROOT, "models", "lenet5_op17.onnx")
BATCH = 16


def pytorch_run(target, max_epochs, threads, seed):
    torch.set_num_threads(threads)
    xtr, ytr, xte, yte = ref.fashion_mnist()
    m = ref.zoo_model_from_onnx("lenet5", MODEL)
    torch.manual_seed(seed)  # after building the model: export_zoo.build seeds torch with 0
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(xtr) // BATCH
    quarter = steps // 4
    train_time, images, reached = 0.0, 0, None
    start = time.perf_counter()  # time to accuracy counts evaluation too, as cb-train's does
    for epoch in range(max_epochs):
        perm = torch.randperm(len(xtr))
        for s in range(steps):
            t0 = time.perf_counter()
            idx = perm[s * BATCH:(s + 1) * BATCH]
            opt.zero_grad()
            loss_fn(m(xtr[idx]), ytr[idx]).backward()
            opt.step()
            train_time += time.perf_counter() - t0
            images += BATCH
            if (s + 1) % quarter == 0:
                with torch.no_grad():
                    acc = float((m(xte).argmax(1) == yte).float().mean())
                if acc >= target:
                    reached = (time.perf_counter() - start, epoch + (s + 1) / steps, acc)
                    return reached, images / train_time
    return reached, images / train_time


def crossbow_run(cb_train, target, max_epochs, threads, learners, seed):
    tmp = tempfile.mkdtemp(prefix="cb_tta_")
    metrics = os.path.join(tmp, "metrics.jsonl")
    cmd = [cb_train, MODEL, "--data", DATA, "--batch-size", str(BATCH), "--lr", "0.01",
           "--momentum", "0.9", "--epochs", str(max_epochs), "--threads", str(threads),
           "--learners", learners, "--target-accuracy", str(target), "--seed", str(seed),
           "--eval-every", str(60000 // BATCH // 4), "--metrics", metrics]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("cb-train failed: " + out.stderr.strip())
    rows = [json.loads(line) for line in open(metrics)]
    hit = next((r for r in rows if r.get("accuracy", 0) >= target), None)
    tuner = [line for line in out.stdout.splitlines() if line.startswith("tuner")]
    done = [line for line in out.stdout.splitlines() if line.startswith("done")]
    ips = float(re.search(r"([0-9.]+) images/s", done[-1]).group(1)) if done else 0.0
    return rows, hit, ips, tuner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--learners", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    args = ap.parse_args()

    pt_hit, pt_ips = pytorch_run(args.target, args.max_epochs, args.threads, args.seed)
    rows, cb_hit, cb_ips, tuner = crossbow_run(args.cb_train, args.target, args.max_epochs,
                                               args.threads, args.learners, args.seed)
    print("LeNet-5, Fashion-MNIST, batch 16, SGD lr 0.01 momentum 0.9, %d threads, target %.1f%%"
          % (args.threads, 100 * args.target))
    if pt_hit:
        print("  pytorch   reached %.2f%% after %.2f epochs in %.1f s, %.0f images/s"
              % (100 * pt_hit[2], pt_hit[1], pt_hit[0], pt_ips))
    else:
        print("  pytorch   did not reach the target in %d epochs, %.0f images/s"
              % (args.max_epochs, pt_ips))
    if cb_hit:
        print("  crossbow  reached %.2f%% at epoch %.2f in %.1f s, %.0f images/s, learners %s"
              % (100 * cb_hit["accuracy"], cb_hit.get("epoch", 0), cb_hit["time"], cb_ips,
                 cb_hit.get("learners")))
    else:
        print("  crossbow  did not reach the target in %d epochs, %.0f images/s"
              % (args.max_epochs, cb_ips))
    for line in tuner:
        print("    " + line.strip())
    print("  throughput ratio crossbow / pytorch: %.2fx (target >= 2)" % (cb_ips / pt_ips))
    if pt_hit and cb_hit:
        print("  time-to-accuracy ratio crossbow / pytorch: %.2f (target <= 0.5)"
              % (cb_hit["time"] / pt_hit[0]))


if __name__ == "__main__":
    main()
