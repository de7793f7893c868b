#!/usr/bin/env python3
"""SMA with AdamW: which central rule and learners' rate scaling train best at K learners.

Runs cb-train on one model and .npz data for the same number of steps, with one learner and
with K learners under each (rule, --lr-scaling) pair, all with AdamW, a cosine schedule and the
same warm-up, and prints each run's final validation loss and its ratio to one learner's.
The numbers in docs/sma.md ("SMA with AdamW") come from the small GPT of models/transformers.py:

  tools/bench/sma_adamw.py GPT.onnx DATA_DIR --learners 4 --steps 600
  tools/bench/sma_adamw.py GPT.onnx DATA_DIR --learners 16 --steps 300

Each run is deterministic (seeded), so one run per configuration is the measurement; the
examples/s column moves with the machine's load.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cb_train, model, data, args, extra):
    cmd = [cb_train, model, "--data", data, "--optimizer", "adamw", "--lr", str(args.lr),
           "--lr-schedule", "cosine", "--warmup-steps", str(args.warmup), "--steps",
           str(args.steps), "--threads", str(args.threads), "--test-limit", str(args.test_limit),
           "--ema", "off", "--seed", "0"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    evals = re.findall(r"^epoch .*test loss ([0-9.]+)", out.stdout, re.M)
    speed = re.search(r"^done .*?([0-9]+) examples/s", out.stdout, re.M)
    return float(evals[-1]), int(speed.group(1)) if speed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--learners", type=int, default=4, help="K")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: steps / 10)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--test-limit", type=int, default=1024)
    ap.add_argument("--rules", default="paper,post-local")
    ap.add_argument("--scalings", default="sqrt,none")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    args = ap.parse_args()
    args.warmup = args.warmup or max(1, args.steps // 10)
    base, speed = run(args.cb_train, args.model, args.data, args, ["--learners", "1"])
    print(f"{args.steps} AdamW steps, lr {args.lr} cosine, {args.warmup} warm-up steps, "
          f"batch 16 per learner, validation on {args.test_limit} examples")
    print(f"| learners | rule | --lr-scaling | validation loss | / one learner's | examples/s |")
    print(f"|---|---|---|---|---|---|")
    print(f"| 1 | - | - | {base:.4f} | 1.000 | {speed} |")
    for rule in args.rules.split(","):
        for scaling in args.scalings.split(","):
            loss, speed = run(args.cb_train, args.model, args.data, args,
                              ["--learners", str(args.learners), "--sma-rule", rule,
                               "--lr-scaling", scaling])
            print(f"| {args.learners} | {rule} | {scaling} | {loss:.4f} | {loss / base:.3f} | "
                  f"{speed} |", flush=True)


if __name__ == "__main__":
    main()
