#!/usr/bin/python3
"""Export crossbow's model zoo from PyTorch to ONNX in TRAINING mode.

Run with Debian's interpreter (it has python3-torch 1.13, python3-torchvision
0.14, python3-onnx 1.12):

    /usr/bin/python3 models/export_zoo.py            # all models
    /usr/bin/python3 models/export_zoo.py --small    # mlp, lenet5, resnet20, transformer
    /usr/bin/python3 models/export_zoo.py --big      # resnet18, resnet50, vgg11_bn, mobilenet_v2
    /usr/bin/python3 models/export_zoo.py --only mlp,lenet5 --force

Each model is exported at opset 13 and opset 17 to <out>/<name>_op13.onnx and
<out>/<name>_op17.onnx, and described in <out>/zoo.json. A file is rewritten
only when it is missing or when zoo.json records a different hash of this
script for it (--force rewrites anyway).
"""

import argparse
import collections
import hashlib
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.nn as nn

OPSETS = (13, 17)
SMALL = ("mlp", "lenet5", "resnet20", "transformer")
BIG = ("resnet18", "resnet50", "vgg11_bn", "mobilenet_v2")
SIZE_LIMIT = 2 * 1024 * 1024  # "small" means every exported file is below 2 MiB


# --------------------------------------------------------------------------- models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                 nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:  # option B: projection shortcut
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idn = x if self.shortcut is None else self.shortcut(x)
        return self.relu(out + idn)


class ResNetCifar(nn.Module):
    """ResNet-20 for CIFAR-10 (He et al. 2016, section 4.2), n=3."""

    def __init__(self, n=3, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        layers, cin = [], 16
        for i, cout in enumerate((16, 32, 64)):
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=1000, seq=32, d_model=64, nhead=4, ff=128, layers=2,
                 num_classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=ff,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers,
                                             enable_nested_tensor=False)
        self.fc = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        x = self.encoder(x)
        return self.fc(x.mean(dim=1))


def _tv(fn_name, **kw):
    def build():
        import torchvision
        return getattr(torchvision.models, fn_name)(weights=None, **kw)
    return build


# name -> (builder, input shape without batch, input dtype, num_classes)
ZOO = collections.OrderedDict([
    ("mlp", (MLP, (1, 28, 28), torch.float32, 10)),
    ("lenet5", (LeNet5, (1, 28, 28), torch.float32, 10)),
    ("resnet20", (ResNetCifar, (3, 32, 32), torch.float32, 10)),
    ("transformer", (TransformerClassifier, (32,), torch.int64, 10)),
    ("resnet18", (_tv("resnet18", num_classes=1000), (3, 224, 224), torch.float32, 1000)),
    ("resnet50", (_tv("resnet50", num_classes=1000), (3, 224, 224), torch.float32, 1000)),
    ("vgg11_bn", (_tv("vgg11_bn"), (3, 224, 224), torch.float32, 1000)),
    ("mobilenet_v2", (_tv("mobilenet_v2"), (3, 224, 224), torch.float32, 1000)),
])

BATCH = 2  # dummy batch for tracing (BN in training mode needs > 1 value per channel)


def build(name):
    torch.manual_seed(0)
    model = ZOO[name][0]()
    model.train()
    return model


def dummy_input(name):
    _, shape, dtype, _ = ZOO[name]
    g = torch.Generator().manual_seed(1)
    if dtype == torch.int64:
        return torch.randint(0, 1000, (BATCH,) + shape, generator=g, dtype=torch.int64)
    return torch.randn((BATCH,) + shape, generator=g)


# --------------------------------------------------------------------------- export

def export(name, opset, path):
    """Export one file; returns (model, onnx ModelProto, number of restored buffers)."""
    import onnx
    from onnx import numpy_helper
    model = build(name)  # fresh model per file
    before = {k: b.detach().clone() for k, b in model.named_buffers()}
    x = dummy_input(name)
    tmp = path + ".tmp"
    with torch.no_grad(), warnings.catch_warnings():
        # train-mode tracing warns once per BN that num_batches_tracked's add_ is dropped
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), tmp,
            export_params=True,
            keep_initializers_as_inputs=False,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            opset_version=opset,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )
    # Tracing runs one train-mode forward, which updates BN running_mean/var before the
    # exporter collects the initializers. Put the freshly initialised values (0 / 1) back
    # so the file holds exactly the state of build(name).
    proto = onnx.load(tmp)
    restored = 0
    for init in proto.graph.initializer:
        if init.name in before:
            ref = before[init.name].numpy()
            if not (numpy_helper.to_array(init) == ref).all():
                init.CopyFrom(numpy_helper.from_array(ref, init.name))
                restored += 1
    if restored:
        onnx.save(proto, tmp)
    os.replace(tmp, path)
    return model, proto, restored


# --------------------------------------------------------------------------- fixtures

FIXTURE_BATCH = {"mlp": 4, "lenet5": 4, "resnet20": 4, "transformer": 4}  # big ones: 2


def write_tensor(path, array, name):
    from onnx import numpy_helper
    t = numpy_helper.from_array(array, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(t.SerializeToString())
    os.replace(tmp, path)


def has_dropout(model):
    return any(isinstance(m, torch.nn.Dropout) for m in model.modules())


def write_fixtures(name, out_dir):
    """Golden forward fixtures: a fixed input and PyTorch's outputs for it, in eval mode (running
    statistics, no dropout) and, for models without dropout, in train mode (batch statistics)."""
    d = os.path.join(out_dir, "fixtures", name)
    os.makedirs(d, exist_ok=True)
    _, shape, dtype, _ = ZOO[name]
    batch = FIXTURE_BATCH.get(name, 2)
    g = torch.Generator().manual_seed(2)
    if dtype == torch.int64:
        x = torch.randint(0, 1000, (batch,) + shape, generator=g, dtype=torch.int64)
    else:
        x = torch.randn((batch,) + shape, generator=g)
    write_tensor(os.path.join(d, "input.pb"), x.numpy(), "input")
    with torch.no_grad():
        model = build(name)
        model.eval()
        write_tensor(os.path.join(d, "eval.pb"), model(x).numpy(), "logits")
        model = build(name)
        if not has_dropout(model):
            model.train()
            write_tensor(os.path.join(d, "train.pb"), model(x).numpy(), "logits")


def numel(dims):
    return int(math.prod(dims)) if dims else 1


def describe_file(path, model, m):
    """Op counts, op signatures and the split of initializers into params/buffers."""
    g = m.graph
    ops = collections.Counter(n.op_type for n in g.node)
    sigs = collections.defaultdict(collections.Counter)
    for n in g.node:
        attrs = ",".join(sorted(a.name for a in n.attribute))
        sigs[n.op_type]["in=%d out=%d attrs=[%s]" % (len(n.input), len(n.output), attrs)] += 1

    params = dict(model.named_parameters())
    buffers = {k: v for k, v in model.named_buffers()}
    init = {i.name: numel(i.dims) for i in g.initializer}
    trainable = {k: v for k, v in init.items() if k in params}
    bufs = {k: v for k, v in init.items() if k in buffers}
    other = sorted(k for k in init if k not in params and k not in buffers)
    missing_params = sorted(k for k in params if k not in init)
    return {
        "file": os.path.basename(path),
        "file_size": os.path.getsize(path),
        "ir_version": m.ir_version,
        "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
        "num_nodes": len(g.node),
        "ops": dict(sorted(ops.items())),
        "op_signatures": {k: dict(v) for k, v in sorted(sigs.items())},
        "graph_inputs": [i.name for i in g.input],
        "graph_outputs": [o.name for o in g.output],
        "initializers": {
            "count": len(init),
            "trainable": sum(trainable.values()),
            "trainable_count": len(trainable),
            "buffers": sum(bufs.values()),
            "buffers_count": len(bufs),
            "buffer_names_present": sorted(set(k.rsplit(".", 1)[-1] for k in bufs)),
            "other": other,
            "params_missing": missing_params,
            "names_match": not other and not missing_params,
        },
    }


def script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def model_info(name, model):
    _, shape, dtype, ncls = ZOO[name]
    return {
        "input_name": "input",
        "input_shape": ["N"] + list(shape),
        "input_dtype": {torch.float32: "float32", torch.int64: "int64"}[dtype],
        "output_name": "logits",
        "output_shape": ["N", ncls],
        "num_classes": ncls,
        "num_params": sum(p.numel() for p in model.parameters()),
        "num_param_tensors": sum(1 for _ in model.parameters()),
        "num_buffers_elems": sum(b.numel() for k, b in model.named_buffers()
                                 if not k.endswith("num_batches_tracked")),
        "group": "small" if name in SMALL else "big",
        "files": {},
    }


# --------------------------------------------------------------------------- main

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=here, help="output folder (default: the script's folder)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--small", action="store_true", help="only " + ",".join(SMALL))
    ap.add_argument("--big", action="store_true", help="only " + ",".join(BIG))
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = ap.parse_args()

    names = []
    if args.only:
        names += [n.strip() for n in args.only.split(",") if n.strip()]
    if args.small:
        names += list(SMALL)
    if args.big:
        names += list(BIG)
    if not names:
        names = list(ZOO)
    bad = [n for n in names if n not in ZOO]
    if bad:
        ap.error("unknown model(s) %s; known: %s" % (",".join(bad), ",".join(ZOO)))
    names = list(dict.fromkeys(names))

    torch.set_num_threads(max(1, args.threads))
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "zoo.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    stamp = script_hash()
    models = manifest.get("models", {})

    rows = []
    for name in names:
        model = build(name)
        old = models.get(name, {}).get("files", {})
        info = model_info(name, model)
        for opset in OPSETS:
            key = "op%d" % opset
            path = os.path.join(args.out, "%s_%s.onnx" % (name, key))
            prev = old.get(key, {})
            fresh = (not args.force and os.path.exists(path) and prev.get("stamp") == stamp
                     and prev.get("file_size") == os.path.getsize(path))
            t0 = time.time()
            if fresh:
                entry = prev
                status, secs = "up to date", 0.0
            else:
                _, proto, restored = export(name, opset, path)
                secs = round(time.time() - t0, 2)
                entry = describe_file(path, model, proto)
                entry["buffers_restored_after_trace"] = restored
                del proto
                entry["stamp"] = stamp  # no timings in zoo.json: keep it reproducible
                status = "exported"
            if not fresh or not os.path.exists(os.path.join(args.out, "fixtures", name, "eval.pb")):
                write_fixtures(name, args.out)
            info["files"][key] = entry
            rows.append((name, key, info["num_params"], info["num_buffers_elems"],
                         entry["initializers"]["trainable"], entry["initializers"]["buffers"],
                         entry["initializers"]["names_match"], entry["num_nodes"],
                         entry["file_size"], secs, status))
        models[name] = info
        del model

    manifest = {
        "generator": "models/export_zoo.py",
        "script_stamp": stamp,
        "torch": torch.__version__,
        "opsets": list(OPSETS),
        "export": {"training": "TRAINING", "do_constant_folding": False,
                   "export_params": True, "keep_initializers_as_inputs": False,
                   "dynamic_axes": {"input": {"0": "batch"}, "logits": {"0": "batch"}},
                   "trace_batch": BATCH, "seed": 0},
        "models": collections.OrderedDict((k, models[k]) for k in ZOO if k in models),
    }
    tmp = manifest_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, manifest_path)

    hdr = ("model", "file", "params", "buffers", "init.train", "init.buf", "names",
           "nodes", "size", "sec", "status")
    fmt = "%-13s %-5s %11s %9s %11s %9s %5s %6s %12s %7s  %s"
    print(fmt % hdr)
    for r in rows:
        print(fmt % (r[0], r[1], r[2], r[3], r[4], r[5], "ok" if r[6] else "NO", r[7],
                     "{:,}".format(r[8]), "%.1f" % r[9], r[10]))
    problems = [r for r in rows if not r[6] or r[2] != r[4]]
    for r in rows:
        grp = "small" if r[0] in SMALL else "big"
        if (grp == "small") != (r[8] < SIZE_LIMIT):
            print("warning: %s_%s is %d bytes but listed as %s" % (r[0], r[1], r[8], grp),
                  file=sys.stderr)
    if problems:
        print("warning: initializer names do not match PyTorch names for: %s"
              % ", ".join(sorted(set(r[0] for r in problems))), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
