#!/usr/bin/env python3
"""Statistical efficiency of SMA against synchronous SGD with the same aggregate batch.

For each k in --learners, two sides train the same model from the same initial weights:
  - SMA: k learners at batch 16 each (one device), with crossbow's defaults for alpha and the
    central momentum unless --alpha / --sma-args say otherwise;
  - SGD: one learner at batch 16k (--alpha 0 --central-momentum 0: torch.optim.SGD bit for bit,
    tests/test_sma.cpp), the alternative that keeps k times more hardware busy.
Each side runs every learning rate of the grid base x {1, sqrt(k), k} (--lr-grid) over --seeds,
and is judged at its best grid learning rate (lowest median epochs to the target, ties broken by
the mean accuracy at the budget). k = 1 is one learner at batch 16 (both sides are the same run).

Every run evaluates the model on all 10,000 test images every 1/--evals-per-epoch epoch (SMA: the
central model z) and is stopped once it has reached the target AND passed --budget epochs, or at
--max-epochs. Reported per configuration: epochs to the target per seed and their median (a run
that never reaches it counts as infinity), and the test accuracy at the budget (mean over seeds).
Epochs count examples, not steps: an SMA step consumes k batches, an SGD step one batch of 16k.
cb-train is told --lr-scaling none so that the grid's learning rate is the one used.

    /usr/bin/python3 tools/bench/sma_epochs.py                 # LeNet-5 / Fashion-MNIST, k 1,2,4,8
    /usr/bin/python3 tools/bench/sma_epochs.py --resnet20      # ResNet-20 on the CIFAR-shaped set
    ... [--learners 2,4,8] [--seeds 0,1,2] [--jobs 2] [--alpha 2/k] [--sma-args "--nesterov"]
        [--sides sma,sgd] [--lr-grid 1,sqrt,k] [--schedule constant | multistep:3 | cosine]
"""
import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 16


def schedule_args(spec):
    if spec == "constant":
        return []
    if spec == "cosine":
        return ["--lr-schedule", "cosine"]
    if spec.startswith("multistep:"):
        return ["--lr-schedule", "multistep", "--lr-milestones"] + spec.split(":")[1].split(",")
    sys.exit("unknown --schedule %r (constant, cosine, multistep:E1,E2...)" % spec)


def eval_k(expr, k):
    """'2/k', '0.1', 'sqrt(k)' ... evaluated with k."""
    return float(eval(expr, {"__builtins__": {}}, {"k": k, "sqrt": math.sqrt}))


def watch(cmd, metrics, enough):
    """Runs one cb-train process writing --metrics to `metrics`, reading its evaluation records as
    they come; stops it (SIGTERM) once enough(rows) is true. Returns (the evaluation records, the
    last line of its error output, or None when it ended well or was stopped)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        done = proc.poll() is not None
        rows = []
        if os.path.exists(metrics):
            with open(metrics) as f:
                rows = [json.loads(line) for line in f if line.endswith("\n")]
            rows = [r for r in rows if r.get("type", "eval") == "eval"]
        if done:
            break
        if rows and enough(rows):
            proc.terminate()
            proc.wait()
            break
        time.sleep(0.2)
    err = None
    if proc.returncode not in (0, -15, 128 + 15):  # cb-train exits 143 when stopped by SIGTERM
        err = (proc.stderr.read().strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return rows, err


def run(args, side, k, lr, seed):
    """One cb-train process; returns (epoch at the target or None, accuracy at the budget, error)."""
    tmp = tempfile.mkdtemp(prefix="cb_sma_epochs_")
    metrics = os.path.join(tmp, "metrics.jsonl")
    batch = BATCH * k if side == "sgd" else BATCH
    learners = 1 if side == "sgd" else k
    steps_per_epoch = args.train_examples // (BATCH * k)  # central steps either way
    cmd = [args.cb_train, args.model, "--data", args.data, "--batch-size", str(batch),
           "--eval-batch-size", "500", "--lr", repr(lr), "--lr-scaling", "none",
           "--momentum", "0.9", "--weight-decay", repr(args.weight_decay),
           "--epochs", str(args.max_epochs), "--seed", str(seed),
           "--learners", str(learners), "--threads", str(args.threads),
           "--eval-every", str(max(1, steps_per_epoch // args.evals_per_epoch)),
           "--metrics", metrics, "--tuner-window", "1000000",
           "--ema", "off"] + schedule_args(args.schedule)  # the models themselves (sma_scale.py: EMA)
    if side == "sgd":
        cmd += ["--alpha", "0", "--central-momentum", "0"]
    else:
        if args.alpha:
            cmd += ["--alpha", repr(eval_k(args.alpha, k))]
        cmd += args.sma_args.split()
    def reached(rows):
        hit = next((r["epoch"] for r in rows if r["accuracy"] >= args.target), None)
        at_budget = next((r["accuracy"] for r in rows if r["epoch"] >= args.budget - 1e-9), None)
        return hit, at_budget

    rows, err = watch(cmd, metrics, lambda rows: None not in reached(rows))
    hit, at_budget = reached(rows)
    if at_budget is None and rows:
        at_budget = rows[-1]["accuracy"]
    return hit, at_budget, err


def fmt_epochs(e):
    return "%.2f" % e if e is not None and e != math.inf else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "lenet5_op17.onnx"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--resnet20", action="store_true",
                    help="ResNet-20 on the CIFAR-shaped set: 10k examples, lr 0.02, wd 5e-4, "
                         "x0.1 at epoch 6, 8 epochs, 2 seeds, k 1,2,4, one evaluation per epoch")
    ap.add_argument("--train-examples", type=int, default=60000, help="size of the training set")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--evals-per-epoch", type=int, default=4)
    ap.add_argument("--learners", default="1,2,4,8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lr", type=float, default=0.01, help="one learner's learning rate at 16")
    ap.add_argument("--lr-grid", default="1,sqrt(k),k", help="factors of --lr, in k")
    ap.add_argument("--sides", default="sma,sgd")
    ap.add_argument("--alpha", default="", help="SMA's alpha as an expression in k (default: "
                                                "cb-train's)")
    ap.add_argument("--sma-k1", action="store_true",
                    help="also run SMA with one learner (z pulled toward it with the defaults)")
    ap.add_argument("--sma-args", default="", help="more cb-train flags for the SMA side")
    ap.add_argument("--schedule", default="constant")
    ap.add_argument("--target", type=float, default=0.89)
    ap.add_argument("--budget", type=float, default=3, help="epochs at which accuracy is reported")
    ap.add_argument("--max-epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="threads per cb-train process")
    ap.add_argument("--jobs", type=int, default=2, help="cb-train processes at once")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    args = ap.parse_args()
    if args.resnet20:
        args.model = os.path.join(ROOT, "models", "resnet20_op17.onnx")
        args.data = os.path.join(ROOT, "build", "data", "fmnist-cifar")
        args.train_examples, args.weight_decay, args.lr = 10000, 5e-4, 0.02
        args.schedule, args.max_epochs, args.budget = "multistep:6", 8, 8
        args.evals_per_epoch = 1
        if args.seeds == "0,1,2":
            args.seeds = "0,1"
        if args.learners == "1,2,4,8":
            args.learners = "1,2,4"
    seeds = [int(s) for s in args.seeds.split(",")]
    ks = [int(k) for k in args.learners.split(",")]
    sides = args.sides.split(",")
    grid = args.lr_grid.split(",")

    def sides_of(k):  # k = 1: one learner at batch 16 (plain SGD), and SMA's k = 1 if asked
        return [s for s in sides if s == "sgd" or args.sma_k1] if k == 1 else sides

    jobs = []  # (side, k, lr, seed)
    for k in ks:
        for side in sides_of(k):
            lrs = sorted({round(args.lr * eval_k(f, k), 10) for f in grid})
            for lr in (lrs if k > 1 else [args.lr]):
                for seed in seeds:
                    jobs.append((side, k, lr, seed))
    print("%s on %s; batch 16 per learner; momentum 0.9, weight decay %g; lr grid %g x {%s}; "
          "schedule %s; target %.1f%%; accuracy at %g epochs; at most %d epochs; seeds %s; "
          "SMA: alpha %s %s" % (os.path.basename(args.model), args.data, args.weight_decay,
                                args.lr, args.lr_grid, args.schedule, 100 * args.target,
                                args.budget, args.max_epochs, args.seeds,
                                args.alpha or "(cb-train's default)", args.sma_args), flush=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(run, args, *j): j for j in jobs}
        for f in concurrent.futures.as_completed(futs):
            j = futs[f]
            results[j] = f.result()
            hit, acc, err = results[j]
            print("  %s k=%d lr %g seed %d: %s epochs, %.2f%% at the budget%s" % (
                j[0], j[1], j[2], j[3], fmt_epochs(hit), 100 * (acc or 0),
                " FAILED: " + err if err else ""), flush=True)

    def summarise(side, k, lr):
        rs = [results[(side, k, lr, s)] for s in seeds]
        hits = [r[0] if r[0] is not None else math.inf for r in rs]
        accs = [r[1] or 0 for r in rs]
        return statistics.median(hits), statistics.mean(accs), hits

    print()
    print("%-4s %-6s %-9s %-26s %-10s   %-9s %-26s %-10s" % (
        "k", "", "best lr", "epochs to target (median)", "acc@budget", "", "", ""))
    best = {}
    lines = []
    for k in ks:
        row = []
        for side in sides_of(k):
            lrs = sorted({lr for (s, kk, lr, _) in results if s == side and kk == k})
            scored = [(summarise(side, k, lr), lr) for lr in lrs]
            (med, acc, hits), lr = min(scored, key=lambda t: (t[0][0], -t[0][1]))
            best[(side, k)] = (med, acc)
            name = "SGD b%d" % (BATCH * k) if side == "sgd" else "SMA k=%d" % k
            row.append("%-10s lr %-7g %-26s %6.2f%%" % (
                name, lr, " ".join(fmt_epochs(h) for h in hits) + " -> " + fmt_epochs(med),
                100 * acc))
        lines.append("%-4d %s" % (k, "   ".join(row)))
    for line in lines:
        print(line)
    if "sma" in sides and "sgd" in sides:
        for k in ks:
            if ("sma", k) not in best or ("sgd", k) not in best:
                continue
            (sm, sa), (gm, ga) = best[("sma", k)], best[("sgd", k)]
            verdict = ("SMA needs no more epochs" if sm <= gm and sm != math.inf else
                       "neither reached the target" if sm == gm == math.inf else
                       "SMA needs MORE epochs")
            print("k=%d: SMA %s vs SGD b%d %s epochs (%s); at the budget %.2f%% vs %.2f%%" % (
                k, fmt_epochs(sm), BATCH * k, fmt_epochs(gm), verdict, 100 * sa, 100 * ga))


if __name__ == "__main__":
    main()
