#!/usr/bin/env python3
"""cb-train vs PyTorch on LeNet-5 / Fashion-MNIST, trained the same way, in one run.

Same initial weights (the ONNX file's), batches in file order (--no-shuffle), batch 16, SGD
lr 0.01 momentum 0.9, one epoch, 2 threads each (PyTorch in the fair configuration of
models/torch_reference.py). Prints: test accuracy of both and the difference (target: within 1
point), the weights after the first 50 steps (target: within 1e-3 relative), `cb-run` on the
exported model reproducing cb-train's test accuracy, and the training-time ratio.

    /usr/bin/python3 tools/bench/lenet_vs_pytorch.py [--epochs 1] [--threads 2]
"""
import argparse
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
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from onnx import numpy_helper  # noqa: E402

DATA = ref.FASHION_MNIST
MODEL = os.path.join(ROOT, "models", "lenet5_op17.onnx")


def weights(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("--cb-run", default=os.path.join(ROOT, "build", "cb-run"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    xtr, ytr, xte, yte = ref.fashion_mnist()
    tmp = tempfile.mkdtemp(prefix="cb_lenet_")

    # PyTorch, same order and hyper-parameters; weights kept after 50 steps.
    m = ref.zoo_model_from_onnx("lenet5", MODEL)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(xtr) // 16
    w50 = None
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        for s in range(steps):
            opt.zero_grad()
            loss_fn(m(xtr[s * 16:(s + 1) * 16]), ytr[s * 16:(s + 1) * 16]).backward()
            opt.step()
            if w50 is None and s == 49:
                w50 = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
    pt_time = time.perf_counter() - t0
    with torch.no_grad():
        pt_acc = float((m(xte).argmax(1) == yte).float().mean())

    # crossbow: 50 steps (weights), then the full run.
    common = [args.cb_train, MODEL, "--data", DATA, "--batch-size", "16", "--no-shuffle",
              "--lr", "0.01", "--momentum", "0.9", "--threads", str(args.threads),
              # one learner, no pull toward z: plain SGD (cb-train's default is SMA, auto-tuned)
              "--learners", "1", "--alpha", "0", "--central-momentum", "0", "--ema", "off"]
    subprocess.run(common + ["--steps", "50", "--output", os.path.join(tmp, "cb50.onnx")],
                   check=True, capture_output=True)
    cb50 = weights(os.path.join(tmp, "cb50.onnx"))
    w_err = max(rel(cb50[k], w50[k]) for k in w50)
    out = subprocess.run(common + ["--epochs", str(args.epochs), "--output",
                                   os.path.join(tmp, "cb.onnx")],
                         check=True, capture_output=True, text=True).stdout
    cb_acc = float(re.search(r"done .*test accuracy ([0-9.]+)%", out).group(1)) / 100
    cb_time = float(re.search(r"\(([0-9.]+) s training\)", out).group(1))

    # cb-run on the exported model over the whole test set.
    inp = os.path.join(tmp, "test_images.pb")
    with open(inp, "wb") as f:
        f.write(numpy_helper.from_array(xte.numpy(), "input").SerializeToString())
    subprocess.run([args.cb_run, os.path.join(tmp, "cb.onnx"), "--input", "input=" + inp,
                    "--output-dir", tmp], check=True, capture_output=True)
    logits = numpy_helper.to_array(onnx.load_tensor(os.path.join(tmp, "logits.pb")))
    run_acc = float((logits.argmax(1) == yte.numpy()).mean())

    print("LeNet-5, Fashion-MNIST, batch 16, SGD lr 0.01 momentum 0.9, file order, "
          "%d epoch(s), %d threads" % (args.epochs, args.threads))
    print("  test accuracy   pytorch %.2f%%   crossbow %.2f%%   difference %+.2f points"
          % (100 * pt_acc, 100 * cb_acc, 100 * (cb_acc - pt_acc)))
    print("  weights after 50 steps: max relative difference %.2e (target <= 1e-3)" % w_err)
    print("  cb-run on the exported model: test accuracy %.2f%% (cb-train reported %.2f%%)"
          % (100 * run_acc, 100 * cb_acc))
    print("  training time   pytorch %.2f s   crossbow %.2f s   ratio %.2fx"
          % (pt_time, cb_time, pt_time / cb_time))
    ok = abs(cb_acc - pt_acc) <= 0.01 and w_err <= 1e-3 and abs(run_acc - cb_acc) < 1e-9
    print("  result: %s" % ("OK" if ok else "NOT MET"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
