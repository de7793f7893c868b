#!/usr/bin/env python3
"""Time to accuracy: `cb-train` with its defaults against PyTorch at batch 16, 32, 64 and 128.

LeNet-5 on Fashion-MNIST, the same initial weights (the ONNX file's) on both sides. Every run is
a whole process, timed from its start to its exit, as a new user would run it: loading the data,
training, and evaluating the whole test set (10,000 images) every quarter epoch until the test
accuracy reaches --target (default 89%) or --max-epochs pass.
  - PyTorch: torch.optim.SGD momentum 0.9 at batch B with the learning rate scaled linearly from
    0.01 at batch 16 (0.01 B / 16), 2 threads, the fair environment of models/torch_reference.py.
  - crossbow: `cb-train lenet5_op17.onnx --data DIR --target-accuracy 0.89 --evals-per-epoch 4
    --epochs 10`, nothing else: the default learning rate (0.01), the auto-tuner, the SMA defaults.
Prints each configuration's time to the target per seed and their median, then crossbow's median
against the FASTEST PyTorch configuration's median (the issue's target: <= 0.3), and the
auto-tuner's choices.

    /usr/bin/python3 tools/bench/tta_lenet.py [--seeds 0,1,2] [--batches 16,32,64,128]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
MODEL = os.path.join(ROOT, "models", "lenet5_op17.onnx")


def torch_worker(batch, seed, target, max_epochs, threads):
    """One PyTorch training process: prints one JSON line and exits once the target is reached."""
    import torch_reference as ref
    import torch
    torch.set_num_threads(threads)
    xtr, ytr, xte, yte = ref.fashion_mnist()
    m = ref.zoo_model_from_onnx("lenet5", MODEL)
    torch.manual_seed(seed)  # after building the model: export_zoo.build seeds torch with 0
    opt = torch.optim.SGD(m.parameters(), lr=0.01 * batch / 16, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(xtr) // batch
    evals = [(steps * q) // 4 for q in (1, 2, 3, 4)]
    best = 0.0
    for epoch in range(max_epochs):
        perm = torch.randperm(len(xtr))
        for s in range(steps):
            idx = perm[s * batch:(s + 1) * batch]
            opt.zero_grad()
            loss_fn(m(xtr[idx]), ytr[idx]).backward()
            opt.step()
            if s + 1 in evals:
                with torch.no_grad():
                    acc = float((m(xte).argmax(1) == yte).float().mean())
                best = max(best, acc)
                if acc >= target:
                    print(json.dumps({"epoch": epoch + (s + 1) / steps, "accuracy": acc}))
                    return
    print(json.dumps({"epoch": None, "accuracy": best}))


def timed(cmd, env=None):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, out


def pytorch_run(batch, seed, args):
    import torch_reference as ref
    env = dict(os.environ, **ref.FAIR_ENV)
    secs, out = timed([sys.executable, os.path.abspath(__file__), "--torch-worker", str(batch),
                       "--seeds", str(seed), "--target", str(args.target),
                       "--max-epochs", str(args.max_epochs), "--threads", str(args.threads)], env)
    if out.returncode != 0:
        raise RuntimeError("PyTorch batch %d failed: %s" % (batch, out.stderr.strip()[-500:]))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return secs if r["epoch"] is not None else None, r["epoch"], None


def crossbow_run(seed, args):
    cmd = [args.cb_train, MODEL, "--data", args.data, "--target-accuracy", str(args.target),
           "--evals-per-epoch", "4", "--epochs", str(args.max_epochs), "--seed", str(seed)]
    secs, out = timed(cmd)
    if out.returncode != 0:
        raise RuntimeError("cb-train failed: " + out.stderr.strip()[-500:])
    m = re.search(r"target +test accuracy [0-9.]+% reached after [0-9.]+ s, ([0-9.]+) epochs",
                  out.stdout)
    tuner = [line.strip() for line in out.stdout.splitlines() if line.startswith("tuner")]
    lr = re.search(r"^sma .*", out.stdout, re.M)
    return (secs if m else None), (float(m.group(1)) if m else None), (tuner, lr.group(0) if lr
                                                                        else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--max-epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--batches", default="16,32,64,128")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("--torch-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.torch_worker:
        torch_worker(args.torch_worker, seeds[0], args.target, args.max_epochs, args.threads)
        return
    batches = [int(b) for b in args.batches.split(",")]

    print("LeNet-5 / Fashion-MNIST to %.1f%% test accuracy (evaluated every quarter epoch), whole "
          "processes, %d threads; PyTorch SGD momentum 0.9, lr 0.01 x batch/16; cb-train defaults"
          % (100 * args.target, args.threads), flush=True)
    results = {}  # name -> [(secs or None, epochs or None)]
    extra = []
    for seed in seeds:  # interleaved, so that a slow phase of the machine hits every side
        for b in batches:
            secs, ep, _ = pytorch_run(b, seed, args)
            results.setdefault("pytorch b%d" % b, []).append((secs, ep))
            print("  seed %d  pytorch b%-4d %s" % (seed, b, "%.1f s, %.2f epochs" % (secs, ep)
                                                    if secs else "target not reached"),
                  flush=True)
        secs, ep, (tuner, sma) = crossbow_run(seed, args)
        results.setdefault("crossbow", []).append((secs, ep))
        print("  seed %d  crossbow     %s" % (seed, "%.1f s, %.2f epochs" % (secs, ep)
                                              if secs else "target not reached"), flush=True)
        extra.append((seed, tuner, sma))

    def med(rs):
        return statistics.median([s if s is not None else float("inf") for s, _ in rs])

    print("%-14s %-30s %-10s %s" % ("configuration", "seconds to target per seed", "median",
                                    "epochs per seed"))
    for name, rs in results.items():
        print("%-14s %-30s %-10s %s" % (
            name, " ".join("%.1f" % s if s else "-" for s, _ in rs),
            "%.1f" % med(rs) if med(rs) != float("inf") else "-",
            " ".join("%.2f" % e if e else "-" for _, e in rs)))
    fastest = min((n for n in results if n != "crossbow"), key=lambda n: med(results[n]))
    ratio = med(results["crossbow"]) / med(results[fastest])
    print("crossbow median %.1f s / fastest PyTorch (%s) median %.1f s = %.2f (target <= 0.3)" % (
        med(results["crossbow"]), fastest, med(results[fastest]), ratio))
    for seed, tuner, sma in extra:
        print("  seed %d: %s" % (seed, sma))
        for line in tuner:
            print("    " + line)


if __name__ == "__main__":
    main()
