#!/usr/bin/env python3
"""crossbow against PyTorch on transformers (models/transformers.py), in one run.

Four parts (--parts, all by default):
  speed: for the small GPT (d 128, 2 layers, T 64) and the large (d 512, 6 layers, T 256), batch
    16, --threads threads, AdamW, the character LM set: training tokens/s and peak RSS of
      - PyTorch f32 and PyTorch under torch.autocast("cpu", torch.bfloat16), each in a process of
        its own (models/torch_reference.py's fair environment), the model with the ONNX file's
        weights;
      - cb-train, one learner, `--precision f32` and `--precision bf16`, tokens/s from its
        --metrics records after the warm-up steps, peak RSS from wait4;
    the ratios crossbow / PyTorch, and each as a share of the machine's matmul peak measured in
    the same run by cb-bench-gemm: training FLOPs per token 6 x (the parameters of the matmuls,
    LM head included, embeddings not) + 12 x layers x T x d (attention's two matmuls, full T x T,
    as PaLM counts them), over the f32 or bf16 peak.
  val: the small GPT from the same weights, the same batches (the training windows in file order:
    cb-train --no-shuffle), --val-steps AdamW steps (lr 1e-3, weight decay 0.01) on each side, then
    the mean loss over the first --val-examples validation windows. Target: crossbow's validation
    loss <= 1.02 x PyTorch's.
  bert: the BERT-style classifier on the padded marker-majority set (models/transformers.py
    bertcls: tokens, mask, y), the same file-order batches of 32, --bert-steps AdamW steps from
    the same weights on each side: validation accuracy of both and the difference (target: within
    1 point), and PyTorch's trained model with the padding unmasked (what the mask is worth).
  vit: the ViT-tiny on the CIFAR-shaped set (build/data/fmnist-cifar; models/make_cifar_shaped.py),
    --vit-steps AdamW steps at batch 32 on both sides: the training loss of the first and last
    evaluation interval and the test accuracy (chance: 10%).

    /usr/bin/python3 tools/bench/transformer_vs_torch.py [--parts speed,val,bert,vit]
        [--models gpt_small,gpt_large] [--threads 2] [--steps 6] [--seconds 6] [--repeats 1]
        [--val-steps 600]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "models"))
import torch_reference as ref  # noqa: E402

ref.fair_env()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import transformers as tr  # noqa: E402  (models/transformers.py, not Hugging Face's)

NAMES = {"gpt_small": "GPT small (d 128, 2 layers, T 64)",
         "gpt_large": "GPT large (d 512, 6 layers, T 256)"}
LR, WD = 1e-3, 0.01


def flops_per_token(name):
    cfg = tr.CONFIGS[name]
    model = tr.build(name)
    matmul = sum(p.numel() for n, p in model.named_parameters()
                 if p.dim() == 2 and not n.startswith(("wte", "wpe")))
    return 6 * matmul + 12 * cfg["layers"] * cfg["T"] * cfg["d"]


def lm_batches(x, y, batch, count, start=0):
    for k in range(start, start + count):
        i = k % (len(x) // batch)
        yield (torch.from_numpy(x[i * batch:(i + 1) * batch].astype(np.int64)),
               torch.from_numpy(y[i * batch:(i + 1) * batch].astype(np.int64)))


def lm_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# --------------------------------------------------------------------------- PyTorch, own process

def vm_hwm(pid):
    """Peak RSS in bytes of process `pid` (its VmHWM; None once it is gone). Not getrusage: a
    child's ru_maxrss starts from this 300 MB Python's, which it was forked from."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def torch_speed_worker(a):
    """Runs in its own process: PyTorch tokens/s, then prints JSON with its peak RSS."""
    torch.set_num_threads(a.threads)
    name, bf16 = a.worker_model, a.worker_bf16
    data = np.load(os.path.join(a.worker_data, "train.npz"))
    x, y = data["tokens"], data["y"]
    model = tr.from_onnx(name, a.worker_onnx)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = lm_loss(model, xb, yb)
        else:
            loss = lm_loss(model, xb, yb)
        loss.backward()
        opt.step()

    it = lm_batches(x, y, a.batch, 10 ** 9)
    for _ in range(a.warmup):
        step(*next(it))
    t0 = time.perf_counter()
    for _ in range(a.worker_steps):
        step(*next(it))
    dt = time.perf_counter() - t0
    print(json.dumps({"tokens_per_s": a.batch * x.shape[1] * a.worker_steps / dt,
                      "rss": vm_hwm(os.getpid())}))


def torch_speed(args, name, onnx_path, data, bf16, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-model", name, "--worker-onnx",
           onnx_path, "--worker-data", data, "--worker-steps", str(steps), "--threads",
           str(args.threads), "--batch", str(args.batch), "--warmup", str(args.warmup)]
    if bf16:
        cmd.append("--worker-bf16")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return None, None, lines[-1][:100] if lines else f"exit {r.returncode}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["tokens_per_s"], out["rss"], None


# --------------------------------------------------------------------------- crossbow

def cb_train(args, cmd_tail, tmp):
    """cb-train with `cmd_tail`; (its --metrics records, peak RSS in bytes, error or None)."""
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    # AdamW: one learner, no central model (cb-train refuses the SMA flags with it).
    cmd = [args.cb_train] + cmd_tail + ["--metrics", metrics, "--threads", str(args.threads),
                                        "--learners", "1", "--ema", "off"]
    log = open(os.path.join(tmp, "cb-train.log"), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    rss = 0
    while True:  # its VmHWM, read until it exits (the peak is held from the first steps on)
        try:
            p.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            rss = max(rss, vm_hwm(p.pid) or 0)
    log.close()
    if p.returncode != 0:
        lines = open(log.name).read().strip().splitlines()
        return None, None, lines[-1][:120] if lines else f"exit {p.returncode}"
    recs = [json.loads(line) for line in open(metrics) if line.strip()]
    return recs, rss or None, None


def cb_speed(args, onnx_path, data, T, precision, steps, tmp):
    # Evaluations every `steps` steps on a few examples: the first record's interval is the
    # warm-up, the second's examples/s covers exactly the measured steps.
    tail = [onnx_path, "--data", data, "--batch-size", str(args.batch), "--steps", str(2 * steps),
            "--eval-every", str(steps), "--test-limit", str(args.batch), "--optimizer", "adamw",
            "--lr", str(LR), "--weight-decay", str(WD), "--precision", precision]
    recs, rss, err = cb_train(args, tail, tmp)
    if err:
        return None, None, err
    rates = [r["images_per_s"] for r in recs if r.get("type") == "eval"][1:]
    if not rates:
        return None, None, "no records after the warm-up"
    return statistics.median(rates) * T, rss, None


def peak(args):
    r = subprocess.run([args.cb_bench_gemm, "--threads", str(args.threads)], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


# --------------------------------------------------------------------------- parts

def part_speed(args, tmp):
    pk = peak(args)
    print(f"peak ({args.threads} threads, oneDNN matmul {pk['size']}^3): f32 "
          f"{pk['f32_gflops']} GFLOP/s, bf16 {pk['bf16_gflops']} GFLOP/s", flush=True)
    rows = []
    for name in args.models.split(","):
        T = tr.CONFIGS[name]["T"]
        onnx_path = os.path.join(tmp, name + ".onnx")
        tr.export(name, onnx_path)
        data = os.path.join(tmp, f"charlm{T}")
        if not os.path.exists(data):
            tr.write_charlm(data, T)
        fl = flops_per_token(name)
        # Steps: --steps, or more where that is under --seconds of PyTorch f32.
        tps, _, _ = torch_speed(args, name, onnx_path, data, False, 2)
        steps = max(args.steps, round(args.seconds * (tps or 0) / (args.batch * T)))
        row = dict(model=name, steps=steps, flops_per_token=fl)
        configs = (("torch_f32", lambda: torch_speed(args, name, onnx_path, data, False, steps)),
                   ("torch_bf16", lambda: torch_speed(args, name, onnx_path, data, True, steps)),
                   ("cb_f32", lambda: cb_speed(args, onnx_path, data, T, "f32", steps, tmp)),
                   ("cb_bf16", lambda: cb_speed(args, onnx_path, data, T, "bf16", steps, tmp)))
        # --repeats rounds of the four, interleaved (this VM drifts by 15-25% within minutes, so
        # each ratio compares runs made close together); the median rate and the largest RSS.
        runs = {key: [] for key, _ in configs}
        for _ in range(args.repeats):
            for key, fn in configs:
                runs[key].append(fn())
        for key, _ in configs:
            ok = [(v, rss) for v, rss, err in runs[key] if v is not None]
            errs = [err for _, _, err in runs[key] if err]
            row[key] = statistics.median(v for v, _ in ok) if ok else None
            row[key + "_rss"] = max((rss for _, rss in ok if rss), default=None)
            row[key + "_note"] = errs[0] if errs else None
            row[key + "_runs"] = [round(v) for v, _ in ok]
        rows.append(row)
        print(json.dumps(row), flush=True)

    def f(v):
        return "-" if v is None else f"{v:,.0f}"

    def mb(v):
        return "-" if v is None else f"{v / 2 ** 20:,.0f}"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    def share(v, fl, g):
        return f"{100 * v * fl / 1e9 / g:.0f}%" if v and g else "-"

    print(f"\nbatch {args.batch}, {args.threads} threads, AdamW; tokens/s (peak RSS MiB), "
          f"median of {args.repeats} interleaved run(s)")
    print("| model | PyTorch f32 | PyTorch bf16 | crossbow f32 | crossbow bf16 | f32 ratio | "
          "bf16 ratio | crossbow bf16 / f32 | crossbow bf16 / PyTorch f32 | "
          "% of peak: PyTorch f32 | crossbow f32 | PyTorch bf16 | crossbow bf16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    f32p, b16p = pk["f32_gflops"], pk["bf16_gflops"]
    for r in rows:
        fl = r["flops_per_token"]
        print(f"| {NAMES[r['model']]} | {f(r['torch_f32'])} ({mb(r['torch_f32_rss'])}) | "
              f"{f(r['torch_bf16'])} ({mb(r['torch_bf16_rss'])}) | "
              f"{f(r['cb_f32'])} ({mb(r['cb_f32_rss'])}) | {f(r['cb_bf16'])} "
              f"({mb(r['cb_bf16_rss'])}) | {ratio(r['cb_f32'], r['torch_f32'])} | "
              f"{ratio(r['cb_bf16'], r['torch_bf16'])} | {ratio(r['cb_bf16'], r['cb_f32'])} | "
              f"{ratio(r['cb_bf16'], r['torch_f32'])} | "
              f"{share(r['torch_f32'], fl, f32p)} | {share(r['cb_f32'], fl, f32p)} | "
              f"{share(r['torch_bf16'], fl, b16p)} | {share(r['cb_bf16'], fl, b16p)} |")
    for r in rows:
        for k in ("torch_f32", "torch_bf16", "cb_f32", "cb_bf16"):
            if r[k + "_note"]:
                print(f"note: {r['model']} {k}: {r[k + '_note']}")


def part_val(args, tmp):
    name = "gpt_small"
    T = tr.CONFIGS[name]["T"]
    onnx_path = os.path.join(tmp, name + ".onnx")
    tr.export(name, onnx_path)
    data = os.path.join(tmp, f"charlm{T}")
    if not os.path.exists(data):
        tr.write_charlm(data, T)
    b, n, nv = args.batch, args.val_steps, args.val_examples
    tail = [onnx_path, "--data", data, "--batch-size", str(b), "--steps", str(n),
            "--eval-every", str(n), "--test-limit", str(nv), "--eval-batch-size", str(b),
            "--no-shuffle", "--optimizer", "adamw", "--lr", str(LR), "--weight-decay", str(WD),
            "--output", os.path.join(tmp, "gpt_trained.onnx")]
    t0 = time.perf_counter()
    recs, _, err = cb_train(args, tail, tmp)
    cb_s = time.perf_counter() - t0
    cb_val = None if err else [r for r in recs if r.get("type") == "summary"][-1]["test_loss"]

    torch.set_num_threads(args.threads)
    tr_ = np.load(os.path.join(data, "train.npz"))
    va = np.load(os.path.join(data, "val.npz"))
    model = tr.from_onnx(name, onnx_path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    t0 = time.perf_counter()
    for xb, yb in lm_batches(tr_["tokens"], tr_["y"], b, n):
        opt.zero_grad()
        lm_loss(model, xb, yb).backward()
        opt.step()
    pt_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        pt_val = statistics.fmean(lm_loss(model, xb, yb).item()
                                  for xb, yb in lm_batches(va["tokens"], va["y"], b, nv // b))
    print(f"\n{NAMES[name]}: validation loss after {n} AdamW steps (lr {LR}, weight decay {WD}, "
          f"batch {b}, file order), mean over {nv // b * b} validation windows")
    print(f"  PyTorch {pt_val:.4f} ({pt_s:.0f} s)   crossbow "
          + (f"{cb_val:.4f} ({cb_s:.0f} s, with start-up and evaluation)   ratio "
             f"{cb_val / pt_val:.4f} (target <= 1.02)" if cb_val is not None else f"failed: {err}"))


def part_bert(args, tmp):
    for n in (int(x) for x in args.bert_steps.split(",")):
        bert_run(args, tmp, n)


def bert_run(args, tmp, n):
    name = "bert_classifier"
    onnx_path = os.path.join(tmp, name + ".onnx")
    tr.export(name, onnx_path)
    data = os.path.join(tmp, "bertcls")
    if not os.path.exists(data):
        tr.write_bertcls(data)
    b = 32
    tail = [onnx_path, "--data", data, "--batch-size", str(b), "--steps", str(n),
            "--eval-every", str(n), "--no-shuffle", "--optimizer", "adamw", "--lr", str(LR),
            "--weight-decay", str(WD)]
    recs, _, err = cb_train(args, tail, tmp)
    cb_acc = None if err else [r for r in recs if r.get("type") == "summary"][-1]["test_accuracy"]

    torch.set_num_threads(args.threads)
    t = np.load(os.path.join(data, "train.npz"))
    v = np.load(os.path.join(data, "val.npz"))
    model = tr.from_onnx(name, onnx_path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    per = len(t["y"]) // b
    for k in range(n):
        s = slice((k % per) * b, (k % per + 1) * b)
        opt.zero_grad()
        F.cross_entropy(model(torch.from_numpy(t["tokens"][s]), torch.from_numpy(t["mask"][s])),
                        torch.from_numpy(t["y"][s])).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(v["tokens"]), torch.from_numpy(v["mask"]))
        pt_acc = float((logits.argmax(1).numpy() == v["y"]).mean())
        # What the mask is worth: the same trained model with every position unmasked.
        nomask = model(torch.from_numpy(v["tokens"]), torch.ones_like(torch.from_numpy(v["mask"])))
        nomask_acc = float((nomask.argmax(1).numpy() == v["y"]).mean())
    print(f"\nBERT-style classifier, padded marker-majority set ({len(t['y'])} train, "
          f"{len(v['y'])} val), batch {b}, {n} AdamW steps, file order")
    if cb_acc is None:
        print(f"  PyTorch {100 * pt_acc:.2f}%   crossbow failed: {err}")
        return
    print(f"  validation accuracy: PyTorch {100 * pt_acc:.2f}%   crossbow {100 * cb_acc:.2f}%   "
          f"difference {100 * (cb_acc - pt_acc):+.2f} points (target: within 1)")
    print(f"  (PyTorch's trained model with the padding unmasked: {100 * nomask_acc:.2f}%)")


def cifar(folder):
    def read(files):
        raw = np.concatenate([np.fromfile(os.path.join(folder, f), dtype=np.uint8) for f in files])
        raw = raw.reshape(-1, 3073)
        return (torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255),
                torch.from_numpy(raw[:, 0].astype(np.int64)))
    train = sorted(f for f in os.listdir(folder) if f.startswith("data_batch_"))
    return read(train), read(["test_batch.bin"])


def part_vit(args, tmp):
    name = "vit_tiny"
    data = args.cifar
    if not os.path.isdir(data):
        print(f"\nViT-tiny: skipped, {data} missing (./setup.sh makes it)")
        return
    onnx_path = os.path.join(tmp, name + ".onnx")
    tr.export(name, onnx_path)
    b, n = 32, args.vit_steps
    every = max(n // 4, 1)
    tail = [onnx_path, "--data", data, "--batch-size", str(b), "--steps", str(n),
            "--eval-every", str(every), "--no-shuffle", "--optimizer", "adamw", "--lr", str(LR),
            "--weight-decay", str(WD)]
    t0 = time.perf_counter()
    recs, _, err = cb_train(args, tail, tmp)
    cb_s = time.perf_counter() - t0
    (xt, yt), (xv, yv) = cifar(data)
    torch.set_num_threads(args.threads)
    model = tr.from_onnx(name, onnx_path)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    per, losses = len(yt) // b, []
    t0 = time.perf_counter()
    for k in range(n):
        s = slice((k % per) * b, (k % per + 1) * b)
        opt.zero_grad()
        loss = F.cross_entropy(model(xt[s]), yt[s])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    pt_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        pt_acc = float(sum((model(xv[i:i + 256]).argmax(1) == yv[i:i + 256]).sum().item()
                           for i in range(0, len(yv), 256)) / len(yv))
    print(f"\nViT-tiny (d 64, 4 layers, 4x4 patches) on the CIFAR-shaped set, batch {b}, "
          f"{n} AdamW steps, file order; training loss over the first and last {every} steps, "
          f"test accuracy (chance 10%)")
    print(f"  PyTorch  loss {statistics.fmean(losses[:every]):.4f} -> "
          f"{statistics.fmean(losses[-every:]):.4f}, accuracy {100 * pt_acc:.2f}% ({pt_s:.0f} s)")
    if err:
        print(f"  crossbow failed: {err}")
        return
    ev = [r for r in recs if r.get("type") == "eval"]
    acc = [r for r in recs if r.get("type") == "summary"][-1]["test_accuracy"]
    print(f"  crossbow loss {ev[0]['loss']:.4f} -> {ev[-1]['loss']:.4f}, accuracy "
          f"{100 * acc:.2f}% ({cb_s:.0f} s with start-up and evaluations)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="speed,val,bert,vit")
    ap.add_argument("--models", default="gpt_small,gpt_large")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per configuration, at least")
    ap.add_argument("--repeats", type=int, default=1,
                    help="speed: rounds of the four configurations, interleaved; medians")
    ap.add_argument("--seconds", type=float, default=6,
                    help="more steps where --steps take less than this (PyTorch f32's time)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed PyTorch steps first")
    ap.add_argument("--val-steps", type=int, default=600)
    ap.add_argument("--val-examples", type=int, default=512)
    ap.add_argument("--bert-steps", default="200,600",
                    help="comma-separated: one comparison per count (200: still learning; 600: "
                    "both near 100%%)")
    ap.add_argument("--vit-steps", type=int, default=600)
    ap.add_argument("--cifar", default=os.path.join(ROOT, "build", "data", "fmnist-cifar"))
    ap.add_argument("--cb-train", default=os.path.join(ROOT, "build", "cb-train"))
    ap.add_argument("--cb-bench-gemm", default=os.path.join(ROOT, "build", "cb-bench-gemm"))
    ap.add_argument("--worker-model", help=argparse.SUPPRESS)
    ap.add_argument("--worker-onnx", help=argparse.SUPPRESS)
    ap.add_argument("--worker-data", help=argparse.SUPPRESS)
    ap.add_argument("--worker-steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--worker-bf16", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker_model:
        return torch_speed_worker(args)
    tmp = tempfile.mkdtemp(prefix="cb_transformers_")
    parts = {"speed": part_speed, "val": part_val, "bert": part_bert, "vit": part_vit}
    for p in args.parts.split(","):
        parts[p](args, tmp)


if __name__ == "__main__":
    main()
