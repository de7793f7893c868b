#!/usr/bin/env python3
"""Compares the outputs a runtime wrote with a data set's reference outputs.

  compare.py OUTDIR MODELDIR [--set N] [--files F0.pb F1.pb ...] [--rtol R] [--atol A] [--quiet]

MODELDIR is a model directory (then --set N picks test_data_set_N, default 0) or a
test_data_set_N directory itself. The references are its output_K.pb, K in graph-output
order; each is a TensorProto whose name is the output's name.

Which file in OUTDIR holds which output:
  --files F0 F1 ...  F_K (relative to OUTDIR unless absolute) is output K, in graph order;
  otherwise          OUTDIR/<output name>.pb if it exists, else the .pb in OUTDIR whose
                     TensorProto name is the output's name.

An element passes when |got - want| <= atol + rtol * |want| (NaN matches NaN, inf must
match exactly); integer and bool outputs must be equal. Dtype and shape must match.
Prints the worst error per output. Exit 0: all match; 1: a mismatch; 2: usage error or
a missing/unreadable file.
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def find_set_dir(model_dir, n):
    if os.path.basename(os.path.normpath(model_dir)).startswith("test_data_set_"):
        return model_dir
    return os.path.join(model_dir, "test_data_set_%d" % n)


def expected_outputs(set_dir):
    out = []
    k = 0
    while os.path.exists(os.path.join(set_dir, "output_%d.pb" % k)):
        out.append(load(os.path.join(set_dir, "output_%d.pb" % k)))
        k += 1
    return out


def locate(outdir, expected, files):
    """Returns one path per expected output, or raises LookupError."""
    if files is not None:
        if len(files) != len(expected):
            raise LookupError("--files names %d files, the data set has %d outputs" % (len(files), len(expected)))
        return [f if os.path.isabs(f) else os.path.join(outdir, f) for f in files]
    by_name = None
    paths = []
    for t in expected:
        direct = os.path.join(outdir, t.name + ".pb") if "/" not in t.name else None
        if direct and os.path.isfile(direct):
            paths.append(direct)
            continue
        if by_name is None:
            by_name = {}
            for f in sorted(os.listdir(outdir)):
                if f.endswith(".pb"):
                    try:
                        by_name.setdefault(load(os.path.join(outdir, f)).name, os.path.join(outdir, f))
                    except Exception:
                        pass
        if t.name not in by_name:
            raise LookupError("no file in %s for output %r (use --files)" % (outdir, t.name))
        paths.append(by_name[t.name])
    return paths


def compare(name, got, want, rtol, atol):
    """Returns (ok, message)."""
    if got.dtype != want.dtype:
        return False, "%s: dtype %s, expected %s" % (name, got.dtype, want.dtype)
    if got.shape != want.shape:
        return False, "%s: shape %s, expected %s" % (name, list(got.shape), list(want.shape))
    if want.size == 0:
        return True, "%s: %s %s empty" % (name, want.dtype, list(want.shape))
    head = "%s: %s %s" % (name, want.dtype, list(want.shape))
    if want.dtype.kind not in "fc":
        bad = got != want
        n = int(bad.sum())
        if n:
            i = np.unravel_index(np.argmax(bad), want.shape)
            return False, "%s: %d of %d differ, first at %s: %s vs %s" % (head, n, want.size, list(i), got[i], want[i])
        return True, "%s: exact" % head
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_ok = np.isnan(g) & np.isnan(w)
    inf_ok = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w)
        err[nan_ok | inf_ok] = 0.0
        err[np.isnan(err)] = np.inf                      # NaN on one side only
        tol = atol + rtol * np.abs(w)
        tol[np.isinf(w)] = 0.0
        bad = err > tol
        rel = np.where(np.abs(w) > 0, err / np.abs(w), np.where(err > 0, np.inf, 0.0))
    i = np.unravel_index(np.argmax(err), want.shape)
    msg = "%s: max abs err %.3g at %s (got %.8g, want %.8g), max rel err %.3g" % (
        head, err[i], list(i), got[i], want[i], np.max(rel))
    n = int(bad.sum())
    if n:
        j = np.unravel_index(np.argmax(err - tol), want.shape)
        return False, "%s; %d of %d outside rtol %g atol %g, worst at %s (got %.8g, want %.8g)" % (
            msg, n, want.size, rtol, atol, list(j), got[j], want[j])
    return True, msg


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("modeldir")
    ap.add_argument("--set", type=int, default=0, help="data set N when MODELDIR is a model directory")
    ap.add_argument("--files", nargs="+", help="one file per graph output, in graph-output order")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--quiet", action="store_true", help="print mismatches only")
    a = ap.parse_args(argv)

    set_dir = find_set_dir(a.modeldir, a.set)
    expected = expected_outputs(set_dir)
    if not expected:
        print("no output_0.pb in %s" % set_dir, file=sys.stderr)
        return 2
    try:
        paths = locate(a.outdir, expected, a.files)
        got = [load(p) for p in paths]
    except Exception as e:  # LookupError, OSError, or a DecodeError from a bad .pb
        print("%s: %s" % (set_dir, e), file=sys.stderr)
        return 2
    ok_all = True
    for t, g, p in zip(expected, got, paths):
        ok, msg = compare(t.name, numpy_helper.to_array(g), numpy_helper.to_array(t), a.rtol, a.atol)
        ok_all &= ok
        if not ok or not a.quiet:
            print("%s %s [%s]" % ("ok  " if ok else "FAIL", msg, os.path.basename(p)))
    if not ok_all:
        print("%s: mismatch" % set_dir)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
