#!/usr/bin/env python3
"""Transformers end to end: models exported from PyTorch, their data sets, and the AdamW golden
fixtures of tests/test_golden_transformers.cpp.

Models (torch.onnx.export, opset 17, training mode, no constant folding, so every initializer
keeps its PyTorch parameter name; the batch axis is dynamic; no Dropout anywhere):
  - gpt_small / gpt_large: a GPT-style decoder language model: token + learned position
    embeddings, pre-LN blocks (LayerNorm -> causal self-attention -> residual, LayerNorm -> GELU
    MLP (4d) -> residual), final LayerNorm, an untied LM head. Input `tokens` i64 [N,T], output
    `logits` f32 [N,T,V]. The causal mask is a boolean buffer used through masked_fill, so the
    graph holds it (Not + Where before the Softmax). small: d 128, 2 layers, 4 heads, T 64; large:
    d 512, 6 layers, 8 heads, T 256; both over the 96 characters of CHARS.
  - bert_classifier: a BERT-style encoder classifier: token + position embeddings and an
    embedding LayerNorm, pre-LN bidirectional blocks, final LayerNorm, BERT's pooler (dense + tanh
    on the first token, [CLS]) and a linear head. Inputs `tokens` i64 [N,T] and `mask` i64 [N,T]
    (1: a real token, 0: padding), the mask turned into an additive bias (0 or -1e9) on the
    attention scores of every query, as BERT does; output `logits` f32 [N,C]. d 64, 2 layers,
    4 heads, T 32, vocabulary 32, 4 classes.
  - vit_tiny: a small ViT for 3x32x32 images (the CIFAR-shaped set of make_cifar_shaped.py):
    4x4 patches by a strided Conv, a [CLS] token, learned positions, pre-LN blocks, final
    LayerNorm, a linear head on [CLS]. Input `input` f32 [N,3,32,32], output `logits` [N,10].
    d 64, 4 layers, 4 heads, MLP 128 (ViT-Tiny's shape, scaled to a 2-core machine).
Weights are nanoGPT's initialisation (normal(0, 0.02), zero biases) from torch.manual_seed(0).

Data sets (.npz, as cb-train reads them: each model input by its name, the target `y`):
  - charlm (T): a character-level language-model set from real text available offline: the
    `.py` files directly in the standard-library folder of the interpreter running this script
    (sysconfig's `stdlib`: /usr/lib/python3.11 for Debian 12's /usr/bin/python3), sorted by name
    and concatenated; tabs become 4 spaces, characters outside CHARS are dropped; each character
    is its index in CHARS. The first 90% of the stream is the training text, the rest validation;
    each is cut into non-overlapping windows of T + 1 characters: `tokens` = the first T, `y` = the
    last T (the next character). Stored as uint8 (cb-train converts integers to the input's i64).
  - bertcls: a classification set where the padding mask matters. Each example: [CLS] (id 0),
    then L real tokens (L uniform in [12, T-1]) drawn from the ids 6..31 with a few of the 4
    marker ids 2..5 among them; the label is the marker that occurs most often among the real
    tokens (made unique by construction). Positions after the real tokens are padding: mask 0,
    and their ids are random (2..31, markers included), as a reused buffer would hold, so a model
    that ignores the mask counts garbage. `tokens`, `mask` and `y`.

Golden fixtures (models/fixtures/<model>/adamw_golden.pb, an onnx GraphProto of named tensors as
training_fixtures.py writes): from the exported weights, STEPS steps of torch.optim.AdamW (lr
1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01) on fixed batches (batch_K_tokens,
batch_K_mask, batch_K_labels), one thread: step_losses; the same steps in float64 (step_losses64:
how far fp32 rounding alone moves PyTorch); then, in eval mode, the logits of a held-out batch
(held_tokens, held_mask, held_logits) and their loss (held_loss).

    /usr/bin/python3 models/transformers.py              # the models and golden fixtures (~10 s;
                                                         # skipped when newer than this script)
    /usr/bin/python3 models/transformers.py --data DIR   # also DIR/charlm64, DIR/bertcls
    /usr/bin/python3 models/transformers.py --only gpt_small --no-fixtures
"""
import argparse
import glob
import math
import os
import sys
import sysconfig
import warnings

if __name__ == "__main__":
    # OpenBLAS (Debian's torch multiplies through it) ignores torch.set_num_threads: one thread,
    # or the fixtures' last steps depend on the machine's core count.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))  # 96 symbols: newline + printable ASCII
BERT_VOCAB, BERT_T, BERT_CLASSES = 32, 32, 4
CLS_ID, MARKERS = 0, (2, 3, 4, 5)  # id 1 is unused ([SEP] in BERT's vocabulary)

CONFIGS = {
    "gpt_small": dict(kind="gpt", vocab=len(CHARS), T=64, d=128, layers=2, heads=4),
    "gpt_large": dict(kind="gpt", vocab=len(CHARS), T=256, d=512, layers=6, heads=8),
    "bert_classifier": dict(kind="bert", vocab=BERT_VOCAB, T=BERT_T, d=64, layers=2, heads=4,
                            classes=BERT_CLASSES),
    "vit_tiny": dict(kind="vit", image=32, patch=4, channels=3, d=64, layers=4, heads=4, mlp=128,
                     classes=10),
}
DEFAULT = ("gpt_small", "bert_classifier", "vit_tiny")  # what setup.sh exports

STEPS, LR, WEIGHT_DECAY = 100, 1e-3, 0.01
GOLDEN_BATCH = {"gpt_small": 4, "bert_classifier": 16}


# --------------------------------------------------------------------------- models

class Attention(nn.Module):
    """Multi-head self-attention; causal: each position sees itself and the ones before."""

    def __init__(self, d, heads, causal, T):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        if causal:
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)),
                                 persistent=False)

    def forward(self, x, bias=None):
        N, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.reshape(N, T, h, C // h).transpose(1, 2)  # [N,h,T,C/h]
        k = k.reshape(N, T, h, C // h).transpose(1, 2)
        v = v.reshape(N, T, h, C // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // h))  # [N,h,T,T]
        if self.causal:
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        if bias is not None:
            att = att + bias
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(N, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, causal, T, mlp=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, causal, T)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, mlp or 4 * d), nn.GELU(), nn.Linear(mlp or 4 * d, d))

    def forward(self, x, bias=None):
        x = x + self.attn(self.ln1(x), bias)
        return x + self.mlp(self.ln2(x))


def init_weights(model):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)


class GPT(nn.Module):
    def __init__(self, vocab, T, d, layers, heads, **_):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads, True, T) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        init_weights(self)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class BertClassifier(nn.Module):
    def __init__(self, vocab, T, d, layers, heads, classes, **_):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(T, d)
        self.ln_emb = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, heads, False, T) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.pool = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)
        init_weights(self)

    def forward(self, tokens, mask):
        T = tokens.shape[1]
        x = self.ln_emb(self.tok(tokens) + self.pos(torch.arange(T, device=tokens.device)))
        bias = (1.0 - mask.to(x.dtype))[:, None, None, :] * -1e9  # [N,1,1,T]: keys only
        for b in self.blocks:
            x = b(x, bias)
        x = self.ln_f(x)
        return self.head(torch.tanh(self.pool(x[:, 0])))


class ViT(nn.Module):
    def __init__(self, image, patch, channels, d, layers, heads, mlp, classes, **_):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(channels, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, False, n + 1, mlp) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)
        init_weights(self)

    def forward(self, input):
        x = self.patch(input).flatten(2).transpose(1, 2)  # [N,P,d]
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x)[:, 0])


KINDS = {"gpt": GPT, "bert": BertClassifier, "vit": ViT}


def build(name):
    torch.manual_seed(0)
    cfg = CONFIGS[name]
    return KINDS[cfg["kind"]](**cfg)


def input_names(name):
    return {"gpt": ["tokens"], "bert": ["tokens", "mask"], "vit": ["input"]}[CONFIGS[name]["kind"]]


def dummy_inputs(name, batch=2):
    cfg = CONFIGS[name]
    if cfg["kind"] == "vit":
        return (torch.randn(batch, cfg["channels"], cfg["image"], cfg["image"]),)
    tokens = torch.randint(0, cfg["vocab"], (batch, cfg["T"]))
    if cfg["kind"] == "gpt":
        return (tokens,)
    return tokens, torch.ones(batch, cfg["T"], dtype=torch.int64)


def export(name, path):
    model = build(name)
    names = input_names(name)
    tmp = path + ".tmp"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, dummy_inputs(name), tmp, export_params=True,
                          keep_initializers_as_inputs=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          opset_version=17, input_names=names, output_names=["logits"],
                          dynamic_axes={**{n: {0: "N"} for n in names}, "logits": {0: "N"}})
    os.replace(tmp, path)
    return model


def from_onnx(name, path):
    """The PyTorch model `name` with the initializers of the ONNX file `path` as its weights."""
    import onnx
    from onnx import numpy_helper
    m = build(name)
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in onnx.load(path).graph.initializer}
    m.load_state_dict({k: inits[k] for k in m.state_dict()})
    return m


# --------------------------------------------------------------------------- data

def stdlib_text():
    """The standard library's top-level .py files, sorted, concatenated, mapped onto CHARS."""
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))
    if not files:
        sys.exit("transformers.py: no .py files in " + sysconfig.get_paths()["stdlib"])
    text = "".join(open(f, encoding="utf-8", errors="ignore").read() for f in files)
    text = text.replace("\t", "    ")
    index = np.full(128, 255, dtype=np.uint8)
    for i, c in enumerate(CHARS):
        index[ord(c)] = i
    raw = np.frombuffer(text.encode("ascii", errors="ignore"), dtype=np.uint8)
    ids = index[raw]
    return ids[ids != 255]


def charlm_windows(ids, T):
    """Non-overlapping windows of T + 1 characters: (tokens [n,T], next characters [n,T])."""
    n = (len(ids) - 1) // T
    w = np.stack([ids[i * T:i * T + T + 1] for i in range(n)])
    return np.ascontiguousarray(w[:, :T]), np.ascontiguousarray(w[:, 1:])


def charlm_split(T):
    ids = stdlib_text()
    cut = len(ids) * 9 // 10
    return charlm_windows(ids[:cut], T), charlm_windows(ids[cut:], T)


def write_charlm(folder, T):
    os.makedirs(folder, exist_ok=True)
    (xt, yt), (xv, yv) = charlm_split(T)
    np.savez(os.path.join(folder, "train.npz"), tokens=xt, y=yt)
    np.savez(os.path.join(folder, "val.npz"), tokens=xv, y=yv)
    return len(xt), len(xv)


def bertcls(n, seed, T=BERT_T):
    """n examples of the marker-majority task (module docstring): tokens, mask, labels."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(2, BERT_VOCAB, (n, T))  # the padding's garbage, overwritten below
    mask = np.zeros((n, T), dtype=np.int64)
    y = rng.integers(0, len(MARKERS), n)
    for i in range(n):
        L = int(rng.integers(12, T))  # real tokens after [CLS] (at least the 10 markers)
        counts = rng.integers(0, 3, len(MARKERS))
        counts[y[i]] = counts.max() + 1 + int(rng.integers(0, 2))
        real = rng.integers(len(MARKERS) + 2, BERT_VOCAB, L)
        where = rng.permutation(L)[:counts.sum()]
        real[where] = np.repeat(np.array(MARKERS), counts)
        tokens[i, 0] = CLS_ID
        tokens[i, 1:L + 1] = real
        mask[i, :L + 1] = 1
    return tokens.astype(np.int64), mask, y.astype(np.int64)


def write_bertcls(folder, train=8192, val=2048):
    os.makedirs(folder, exist_ok=True)
    for split, n, seed in (("train", train, 1), ("val", val, 2)):
        t, m, y = bertcls(n, seed)
        np.savez(os.path.join(folder, split + ".npz"), tokens=t, mask=m, y=y)


# --------------------------------------------------------------------------- golden fixtures

def loss_of(model, name, inputs, y):
    logits = model(*inputs)
    if CONFIGS[name]["kind"] == "gpt":
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), logits
    return F.cross_entropy(logits, y), logits


def golden_batches(name, count, batch):
    if CONFIGS[name]["kind"] == "gpt":
        (x, y), (xv, yv) = charlm_split(CONFIGS[name]["T"])
        rng = np.random.default_rng(3)
        pick = rng.permutation(len(x))[:count * batch]
        out = [((torch.from_numpy(x[pick[k * batch:(k + 1) * batch]].astype(np.int64)),),
                torch.from_numpy(y[pick[k * batch:(k + 1) * batch]].astype(np.int64)))
               for k in range(count)]
        held = ((torch.from_numpy(xv[:batch].astype(np.int64)),),
                torch.from_numpy(yv[:batch].astype(np.int64)))
        return out, held
    t, m, y = bertcls(count * batch + batch, seed=3)
    t, m, y = torch.from_numpy(t), torch.from_numpy(m), torch.from_numpy(y)
    out = [((t[k * batch:(k + 1) * batch], m[k * batch:(k + 1) * batch]),
            y[k * batch:(k + 1) * batch]) for k in range(count)]
    return out, ((t[-batch:], m[-batch:]), y[-batch:])


def losses64(name, model_path, data):
    """The same steps in float64: how far fp32 rounding alone moves PyTorch's losses."""
    model = from_onnx(name, model_path).double()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WEIGHT_DECAY)
    out = []
    for inputs, y in data:
        opt.zero_grad()
        loss, _ = loss_of(model, name, inputs, y)
        loss.backward()
        out.append(loss.item())
        opt.step()
    return out


def write_golden(name, model_path):
    from onnx import helper, numpy_helper
    model = from_onnx(name, model_path)
    model.train()
    data, held = golden_batches(name, STEPS, GOLDEN_BATCH[name])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WEIGHT_DECAY)
    names = input_names(name)
    tensors, losses = [], []
    for k, (inputs, y) in enumerate(data):
        for n, x in zip(names, inputs):
            tensors.append(numpy_helper.from_array(x.numpy(), "batch_%d_%s" % (k, n)))
        tensors.append(numpy_helper.from_array(y.numpy(), "batch_%d_labels" % k))
        opt.zero_grad()
        loss, _ = loss_of(model, name, inputs, y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    tensors.append(numpy_helper.from_array(np.array(losses, dtype=np.float32), "step_losses"))
    tensors.append(numpy_helper.from_array(np.array(losses64(name, model_path, data),
                                                    dtype=np.float64), "step_losses64"))
    model.eval()
    with torch.no_grad():
        loss, logits = loss_of(model, name, *held)
    for n, x in zip(names, held[0]):
        tensors.append(numpy_helper.from_array(x.numpy(), "held_" + n))
    tensors.append(numpy_helper.from_array(held[1].numpy(), "held_labels"))
    tensors.append(numpy_helper.from_array(logits.numpy(), "held_logits"))
    tensors.append(numpy_helper.from_array(np.array(loss.item(), dtype=np.float32), "held_loss"))
    graph = helper.make_graph([], name + "_adamw_fixture", [], [], initializer=tensors)
    d = os.path.join(HERE, "fixtures", name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "adamw_golden.pb")
    with open(path + ".tmp", "wb") as f:
        f.write(graph.SerializeToString())
    os.replace(path + ".tmp", path)
    print("%-16s AdamW x %d: loss %.4f -> %.4f, held-out %.4f -> %s"
          % (name, STEPS, losses[0], losses[-1], loss.item(), os.path.relpath(path)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(DEFAULT), help="models, comma-separated: "
                    + ",".join(CONFIGS))
    ap.add_argument("--out", default=HERE, help="where the .onnx files go (default: models/)")
    ap.add_argument("--no-fixtures", action="store_true")
    ap.add_argument("--force", action="store_true", help="rewrite files newer than this script")
    ap.add_argument("--data", default="", help="also write the data sets under this folder")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in [n for n in args.only.split(",") if n]:
        path = os.path.join(args.out, name + ".onnx")
        fixture = name in GOLDEN_BATCH and not args.no_fixtures
        made = [path] + ([os.path.join(HERE, "fixtures", name, "adamw_golden.pb")] if fixture
                         else [])
        if not args.force and all(os.path.exists(f) and os.path.getmtime(f) >=
                                  os.path.getmtime(__file__) for f in made):
            continue  # up to date: newer than this script
        export(name, path)
        if fixture:
            write_golden(name, path)
    if args.data:
        print("charlm64: %d train / %d val windows" % write_charlm(
            os.path.join(args.data, "charlm64"), 64))
        write_bertcls(os.path.join(args.data, "bertcls"))


if __name__ == "__main__":
    main()
