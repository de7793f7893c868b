#!/usr/bin/env python3
"""Is the auto-tuner's choice stable? Runs `cb-train --learners auto` N times on the same model and
prints, per run, every tuner decision (the windows' median images/s, their spread, the gain and the
gain it needed) and the learners it settled on; then how many runs chose each number.

    /usr/bin/python3 tools/bench/tuner_stability.py [--runs 5] [--model M --data D] [-- extra flags]
"""
import argparse
import collections
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "lenet5_op17.onnx"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--steps", type=int, default=1500, help="enough for the tuner to finish")
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("extra", nargs="*", help="more cb-train flags (after --)")
    args = ap.parse_args()
    chosen = collections.Counter()
    for r in range(args.runs):
        out = subprocess.run([args.cb_train, args.model, "--data", args.data, "--learners", "auto",
                              "--steps", str(args.steps), "--test-limit", "100"] + args.extra,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit("cb-train failed: " + out.stderr.strip()[-400:])
        tuner = [line for line in out.stdout.splitlines() if line.startswith("tuner")]
        final = re.search(r"-> (\d+)/device", tuner[-1]).group(1) if tuner else "?"
        chosen[final] += 1
        print("run %d: settled on %s learner(s) per device" % (r + 1, final))
        for line in tuner:
            m = re.match(r"tuner +(\d+ learners?/device \([^)]*\)): (\d+) images/s, median of "
                         r"\[[^\]]*\], spread ([0-9.]+%)(?:, gain ([^ ]+) \(needed ([0-9.]+%)\))?"
                         r": ([^(]*) ->", line)
            if m:
                print("    %-32s median %6s images/s  spread %6s  gain %7s  needed %6s  %s" % (
                    m.group(1), m.group(2), m.group(3), m.group(4) or "", m.group(5) or "",
                    m.group(6).strip()))
            else:
                print("    " + line)
    print("choices over %d runs: %s" % (args.runs, ", ".join(
        "%s learner(s) x %d" % (k, n) for k, n in sorted(chosen.items()))))


if __name__ == "__main__":
    main()
