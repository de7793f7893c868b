#!/usr/bin/env python3
"""SMA with many learners against large-batch synchronous SGD, with and without the weight average.

Where CROSSBOW's claim lives: K learners of batch 16 (aggregate batch 16K of 256 and more), against
one learner at batch 16K trained with the standard large-batch recipe (Goyal et al. 2017: the
learning rate scaled linearly with the batch, a gradual warm-up over --warmup-epochs, momentum 0.9)
at the best of a grid of three rates. For each K:
  - SMA: `cb-train --learners K --sma-rule R` for each central rule R of --rules, with cb-train's
    defaults otherwise (alpha, learning-rate scaling, central momentum, outer step: what a user
    gets who only raises the learners) plus --sma-args;
  - SGD: one learner at batch 16K, --alpha 0 --central-momentum 0 (torch.optim.SGD), lr =
    --lr x K x f for f in --sgd-grid, --warmup-steps of --warmup-epochs.
Both with `--ema Ee --eval-unaveraged` (E = --ema-epochs: the weight average's time constant in
epochs, the decay per step 1 - 1 / (E x steps per epoch)): one run gives both curves, the
average's ("+ EMA") and the unaveraged model's (z, or SGD's weights).
Every run evaluates all 10,000 test images --evals-per-epoch times an epoch and runs until it has
reached --target and passed the last reported epoch, or --budget epochs. Reported per row: the
epochs to the target per seed and their median (a run that never gets there counts as infinity,
printed "-"), and the mean test accuracy at --at epochs. Epochs count examples: an SMA step uses K
batches of 16, an SGD step one batch of 16K.

    /usr/bin/python3 tools/bench/sma_scale.py                       # LeNet-5, K 16,64,256, 3 seeds
    /usr/bin/python3 tools/bench/sma_scale.py --resnet20            # ResNet-20, CIFAR-shaped, K 16
    ... [--learners 16,64] [--seeds 0,1,2] [--jobs 2] [--sma-args "--alpha 0.01"] [--sides sma]
        [--rules paper,slowmo]
"""
import argparse
import concurrent.futures
import math
import os
import statistics
import sys
import tempfile

from sma_epochs import fmt_epochs, watch  # the same folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 16


def steps_per_epoch(args, k):
    return args.train_examples // (BATCH * k)


def ema_decay(args, k):
    return 1 - 1 / (args.ema_epochs * steps_per_epoch(args, k))


def run(args, side, k, f, seed, rule):
    """One cb-train process: {curve: (epoch at the target or None, {at: accuracy})}, error."""
    tmp = tempfile.mkdtemp(prefix="cb_sma_scale_")
    metrics = os.path.join(tmp, "metrics.jsonl")
    spe = steps_per_epoch(args, k)
    cmd = [args.cb_train, args.model, "--data", args.data, "--eval-batch-size", "500",
           "--momentum", "0.9", "--weight-decay", repr(args.weight_decay),
           "--epochs", str(args.budget), "--seed", str(seed), "--threads", str(args.threads),
           "--eval-every", str(max(1, spe // args.evals_per_epoch)), "--metrics", metrics,
           "--tuner-window", "1000000"] + args.schedule.split()
    cmd += ["--ema", "%ge" % args.ema_epochs, "--eval-unaveraged"]
    if side == "sgd":
        cmd += ["--learners", "1", "--batch-size", str(BATCH * k), "--lr",
                repr(args.lr * k * f), "--lr-scaling", "none", "--alpha", "0",
                "--central-momentum", "0", "--warmup-steps", str(int(args.warmup_epochs * spe))]
    else:
        cmd += ["--learners", str(k), "--batch-size", str(BATCH), "--lr", repr(args.lr),
                "--sma-rule", rule]
        cmd += args.sma_args.split()
    curves = {side: "unaveraged_accuracy", side + "+ema": "accuracy"}

    def reached(rows):  # per curve: (epoch at the target or None, {at: accuracy})
        out = {}
        for name, key in curves.items():
            hit = next((r["epoch"] for r in rows if (r.get(key) or 0) >= args.target), None)
            acc = {}
            for at in args.at:  # the last evaluation at or before `at`, if within its interval
                past = [r for r in rows if r["epoch"] <= at + 1e-9]
                if past and past[-1]["epoch"] > at - 1.0 / args.evals_per_epoch:
                    acc[at] = past[-1].get(key) or 0
            out[name] = (hit, acc)
        return out

    def enough(rows):
        out = reached(rows)
        return all(h is not None and max(args.at) in acc for h, acc in out.values())

    rows, err = watch(cmd, metrics, enough)
    out = reached(rows)
    for name, (hit, acc) in out.items():  # a run that ended early (diverged): its last accuracy
        for at in args.at:
            acc.setdefault(at, (rows[-1].get(curves[name]) or 0) if rows and not err else 0)
    return out, err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "lenet5_op17.onnx"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--resnet20", action="store_true",
                    help="ResNet-20 on the CIFAR-shaped set (make_cifar_shaped.py): 10k "
                         "examples, lr 0.02, weight decay 5e-4, x0.1 at epoch 6, K 16, 2 seeds, "
                         "8 epochs, target 0.88, accuracy at 4 and 8, warm-up 1 epoch")
    ap.add_argument("--train-examples", type=int, default=60000)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--learners", default="16,64,256")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lr", type=float, default=0.01, help="one learner's rate at batch 16")
    ap.add_argument("--sgd-grid", default="0.25,0.5,1",
                    help="SGD's rates: --lr x K x each factor (linear scaling and below)")
    ap.add_argument("--warmup-epochs", type=float, default=5)
    ap.add_argument("--ema-epochs", type=float, default=0.25,
                    help="the average's time constant in epochs of central steps")
    ap.add_argument("--sides", default="sma,sgd")
    ap.add_argument("--sma-args", default="", help="more cb-train flags for the SMA side")
    ap.add_argument("--rules", default="paper,elastic,slowmo,post-local",
                    help="SMA's central rules (--sma-rule), each a row")
    ap.add_argument("--schedule", default="", help="cb-train flags of the schedule (both sides)")
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--at", default="5,10", help="epochs at which accuracy is reported")
    ap.add_argument("--budget", type=int, default=20, help="epochs at most")
    ap.add_argument("--evals-per-epoch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="threads per cb-train process")
    ap.add_argument("--jobs", type=int, default=2, help="cb-train processes at once")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    args = ap.parse_args()
    if args.resnet20:
        args.model = os.path.join(ROOT, "models", "resnet20_op17.onnx")
        args.data = os.path.join(ROOT, "build", "data", "fmnist-cifar")
        args.train_examples, args.weight_decay, args.lr = 10000, 5e-4, 0.02
        args.budget, args.target, args.evals_per_epoch = 8, 0.88, 1
        args.warmup_epochs = min(args.warmup_epochs, 1)
        if not args.schedule:
            args.schedule = "--lr-schedule multistep --lr-milestones 6"
        if args.seeds == "0,1,2":
            args.seeds = "0,1"
        if args.learners == "16,64,256":
            args.learners = "16"
        if args.at == "5,10":
            args.at = "4,8"
    args.at = [float(a) for a in args.at.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = [int(k) for k in args.learners.split(",")]
    sides = args.sides.split(",")
    grid = [float(f) for f in args.sgd_grid.split(",")]
    rules = args.rules.split(",")
    jobs = []  # (side, k, factor, seed, rule)
    for k in ks:
        for side in sides:
            for f in (grid if side == "sgd" else [1.0]):
                for rule in (rules if side == "sma" else ["-"]):
                    for seed in seeds:
                        jobs.append((side, k, f, seed, rule))
    print("%s on %s (%d examples); batch 16 per learner; momentum 0.9, weight decay %g; SMA: "
          "--lr %g, cb-train's defaults %s; EMA time constant %g epochs; SGD: lr %g x K x "
          "{%s}, warm-up %g epochs; target %.1f%% within %d epochs; seeds %s" % (
              os.path.basename(args.model), args.data, args.train_examples, args.weight_decay,
              args.lr, args.sma_args, args.ema_epochs, args.lr, args.sgd_grid,
              args.warmup_epochs, 100 * args.target, args.budget, args.seeds), flush=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(run, args, *j): j for j in jobs}
        for fut in concurrent.futures.as_completed(futs):
            j = futs[fut]
            results[j] = fut.result()
            out, err = results[j]
            print("  %s K=%d %s seed %d: %s%s" % (
                j[0], j[1], "lr %g" % (args.lr * j[1] * j[2]) if j[0] == "sgd" else j[4], j[3],
                "; ".join("%s %s epochs, %s" % (
                    n, fmt_epochs(h), " ".join("%.2f%%@%g" % (100 * a, at)
                                               for at, a in sorted(acc.items())))
                          for n, (h, acc) in out.items()),
                " FAILED: " + err if err else ""), flush=True)

    def summary(side, curve, k, f, rule):
        rs = [results[(side, k, f, s, rule)][0][curve] for s in seeds]
        hits = [h if h is not None else math.inf for h, _ in rs]
        accs = {at: statistics.mean(acc[at] for _, acc in rs) for at in args.at}
        return statistics.median(hits), accs, hits

    print()
    head = "| K | aggregate batch | method | lr | epochs to %.0f%% (per seed) | median |" % (
        100 * args.target)
    head += "".join(" acc @%g |" % at for at in args.at)
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for k in ks:
        rows = []
        for rule in rules:
            rows += [("sma", "sma", "SMA %s (z)" % rule, rule),
                     ("sma", "sma+ema", "SMA %s + EMA" % rule, rule)]
        rows += [("sgd", "sgd", "S-SGD, best of grid", "-"),
                 ("sgd", "sgd+ema", "S-SGD + EMA, best of grid", "-")]
        for side, curve, name, rule in rows:
            if side not in sides:
                continue
            fs = grid if side == "sgd" else [1.0]
            scored = [(summary(side, curve, k, f, rule), f) for f in fs]
            (med, accs, hits), f = min(scored, key=lambda t: (t[0][0], -t[0][1][args.at[-1]]))
            lr = ("%g" % (args.lr * k * f)) if side == "sgd" else "%g (defaults)" % args.lr
            if curve.endswith("+ema"):
                lr += ", decay %.4g" % ema_decay(args, k)
            print("| %d | %d | %s | %s | %s | %s |%s" % (
                k, BATCH * k, name, lr, " ".join(fmt_epochs(h) for h in hits),
                fmt_epochs(med), "".join(" %.2f%% |" % (100 * accs[at]) for at in args.at)))


if __name__ == "__main__":
    sys.exit(main())
