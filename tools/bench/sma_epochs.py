#!/usr/bin/env python3
"""Statistical efficiency of SMA: epochs to a test accuracy, SMA with k learners vs one learner.

By default LeNet-5 on Fashion-MNIST at batch 16 (per learner), SGD momentum 0.9 (--model,
--data, --train-examples, --weight-decay for others, e.g. ResNet-20 on the CIFAR-shaped set). The baseline is one
learner with --alpha 0 --central-momentum 0, which is plain SGD (bit for bit, tests/test_sma.cpp).
SMA runs k learners with the defaults (alpha = 1/k, mu_z = 0.9) and the learning rate scaled
with k as --lr-scaling says. Every run evaluates the central model on all 10,000 test images
every quarter epoch and stops at the target or after --max-epochs. Prints, per configuration and
seed, the epochs at the first evaluation at or above the target and the final test accuracy,
the medians over seeds, and whether the median epochs are no more than one learner's.

Epochs count examples, not steps: with k learners one SMA step consumes k batches, so an epoch
is 3750 / k steps of the central model.

    /usr/bin/python3 tools/bench/sma_epochs.py [--learners 2,4,8] [--seeds 0,1,2]
        [--schedule constant | multistep:3 | cosine] [--lr-scaling linear | none | sqrt]
    /usr/bin/python3 tools/bench/sma_epochs.py --model models/resnet20_op17.onnx \
        --data build/data/fmnist-cifar --train-examples 10000 --weight-decay 5e-4 --lr 0.02 \
        --learners 2,4 --seeds 0 --schedule multistep:6 --max-epochs 8 --evals-per-epoch 1
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 16


def schedule_args(spec, max_epochs):
    if spec == "constant":
        return []
    if spec == "cosine":
        return ["--lr-schedule", "cosine"]
    if spec.startswith("multistep:"):
        return ["--lr-schedule", "multistep", "--lr-milestones"] + spec.split(":")[1].split(",")
    sys.exit("unknown --schedule %r (constant, cosine, multistep:E1,E2...)" % spec)


def run(cb_train, k, lr, seed, args):
    """Returns (epoch at the target or None, the metrics rows)."""
    tmp = tempfile.mkdtemp(prefix="cb_sma_epochs_")
    metrics = os.path.join(tmp, "metrics.jsonl")
    steps_per_epoch = args.train_examples // BATCH
    cmd = [cb_train, args.model, "--data", args.data, "--batch-size", str(BATCH), "--lr", repr(lr),
           "--momentum", "0.9", "--weight-decay", repr(args.weight_decay),
           "--epochs", str(args.max_epochs), "--seed", str(seed),
           "--learners", str(k), "--threads", str(args.threads),
           "--eval-every", str(max(1, steps_per_epoch // (args.evals_per_epoch * k))),
           "--metrics", metrics,
           "--target-accuracy", str(args.target)] + schedule_args(args.schedule, args.max_epochs)
    if k == 1:
        cmd += ["--alpha", "0", "--central-momentum", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, [], out.stderr.strip().splitlines()[-1]
    rows = [json.loads(line) for line in open(metrics)]
    hit = next((r["epoch"] for r in rows if r["accuracy"] >= args.target), None)
    return hit, rows, None


def scaled_lr(lr, k, how):
    return {"none": lr, "linear": lr * k, "sqrt": lr * math.sqrt(k)}[how]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "lenet5_op17.onnx"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--train-examples", type=int, default=60000, help="size of the training set")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--evals-per-epoch", type=int, default=4)
    ap.add_argument("--learners", default="2,4,8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lr", type=float, default=0.01, help="one learner's learning rate")
    ap.add_argument("--lr-scaling", default="linear", choices=["none", "linear", "sqrt"])
    ap.add_argument("--schedule", default="constant")
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--max-epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = [1] + [int(k) for k in args.learners.split(",")]

    print("%s on %s, batch 16 per learner, momentum 0.9, weight decay %g, lr %g x %s scaling, "
          "schedule %s, target %.1f%%, %d evaluations per epoch, at most %d epochs"
          % (os.path.basename(args.model), args.data, args.weight_decay, args.lr,
             args.lr_scaling, args.schedule, 100 * args.target, args.evals_per_epoch,
             args.max_epochs))
    print("%-22s %-8s %s" % ("configuration", "lr",
                             "epochs to target per seed -> median | final accuracy per seed"))
    medians = {}
    for k in ks:
        lr = args.lr if k == 1 else scaled_lr(args.lr, k, args.lr_scaling)
        hits, finals = [], []
        for seed in seeds:
            hit, rows, err = run(args.cb_train, k, lr, seed, args)
            hits.append(hit)
            finals.append(rows[-1]["accuracy"] if rows else math.nan)
            if err:
                print("  k=%d seed %d failed: %s" % (k, seed, err))
        # A run that never reached the target counts as infinitely many epochs.
        med = statistics.median([h if h is not None else math.inf for h in hits])
        medians[k] = med
        name = "SGD (1 learner)" if k == 1 else "SMA %d learners" % k
        cells = " ".join("%5.2f" % h if h is not None else "    -" for h in hits)
        print("%-22s %-8g %s -> %s | %s" % (
            name, lr, cells, "%.2f" % med if med != math.inf else "not reached",
            " ".join("%.2f%%" % (100 * f) for f in finals)), flush=True)
    base = medians[1]
    for k in ks[1:]:
        if base == math.inf and medians[k] == math.inf:
            verdict = "neither reached the target"
        elif medians[k] <= base:
            verdict = "no more epochs than SGD"
        else:
            verdict = "MORE epochs than SGD"
        print("SMA k=%d: median %s vs SGD %s epochs: %s" % (
            k, "%.2f" % medians[k] if medians[k] != math.inf else "-",
            "%.2f" % base if base != math.inf else "-", verdict))


if __name__ == "__main__":
    main()
