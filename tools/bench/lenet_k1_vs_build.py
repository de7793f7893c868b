#!/usr/bin/env python3
"""One learner's LeNet-5 training speed against another build of cb-train, in one run.

Runs both binaries alternately, --rounds times, each training LeNet-5 on Fashion-MNIST for one
epoch as plain SGD (one learner, alpha 0, central momentum 0, file order, 2 threads; --ema off
where the binary knows it), and prints each run's training images/s, the medians and their
ratio. Build the other commit first, e.g. the last one before the single engine:

    git worktree add /tmp/old 2aba004^
    cmake -S /tmp/old -B /tmp/old/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCB_WITH_CUDA=OFF
    cmake --build /tmp/old/build --target cb-train
    /usr/bin/python3 tools/bench/lenet_k1_vs_build.py --other /tmp/old/build/cb-train
"""
import argparse
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def images_per_s(binary, args):
    cmd = [binary, os.path.join(ROOT, "models", "lenet5_op17.onnx"), "--data", args.data,
           "--epochs", "1", "--learners", "1", "--alpha", "0", "--central-momentum", "0",
           "--no-shuffle", "--threads", str(args.threads)]
    helptext = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    if "--ema" in helptext:
        cmd += ["--ema", "off"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    done = [line for line in r.stdout.splitlines() if line.startswith("done")]
    m = re.search(r"([0-9.]+)(k?) (?:images|examples)/s", done[-1]) if done else None
    if not m:
        raise SystemExit(f"{binary}: no 'done ... images/s' line in its output")
    return float(m.group(1)) * (1000 if m.group(2) else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--other", required=True, help="the other build's cb-train")
    ap.add_argument("--this", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs = {"this": [], "other": []}
    for i in range(args.rounds):
        order = ("this", "other") if i % 2 == 0 else ("other", "this")
        for who in order:
            v = images_per_s(args.this if who == "this" else args.other, args)
            runs[who].append(v)
            print(f"round {i + 1} {who:5s} {v:9.0f} images/s", flush=True)
    a, b = statistics.median(runs["this"]), statistics.median(runs["other"])
    print(f"\nmedian: this {a:.0f}, other {b:.0f} images/s: this / other = {a / b:.3f}x")


if __name__ == "__main__":
    main()
