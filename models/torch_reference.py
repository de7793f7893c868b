"""Shared by the PyTorch side of the benchmarks and reference scripts: the fair-comparison
environment (FAIR_ENV below, PyTorch's fastest configuration on the project's 2-core VMs: OpenBLAS
single-threaded so its threads do not fight PyTorch's OpenMP threads, and glibc's malloc never
trimming or mmapping, as page faults cost ~8 us there), Fashion-MNIST as tensors, and zoo models
loaded with the weights of an ONNX file (so both frameworks start from the same parameters).

Import this module before torch: fair_env() re-executes the script once with the environment set.
"""
import gzip
import os
import sys

FAIR_ENV = {"OPENBLAS_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "1000000000",
            "MALLOC_TRIM_THRESHOLD_": "1000000000000"}
FASHION_MNIST = "/usr/share/datasets/fashion-mnist/"


def fair_env():
    """PyTorch's best configuration on these VMs; must run before torch is imported."""
    if any(os.environ.get(k) != v for k, v in FAIR_ENV.items()):
        os.environ.update(FAIR_ENV)
        os.execv(sys.executable, [sys.executable] + sys.argv)


def fashion_mnist(folder=FASHION_MNIST):
    """(train images [60000,1,28,28] f32 in [0,1], train labels i64, test images, test labels)."""
    import numpy as np
    import torch

    def load(name, offset):
        return np.frombuffer(gzip.open(os.path.join(folder, name)).read()[offset:], dtype=np.uint8)

    def images(name):
        return torch.from_numpy(load(name, 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255)

    def labels(name):
        return torch.from_numpy(load(name, 8).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def zoo_model_from_onnx(name, onnx_path):
    """The zoo's PyTorch model `name` with the initializers of `onnx_path` as its weights."""
    import onnx
    import torch
    from onnx import numpy_helper
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_zoo
    m = export_zoo.build(name)
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in onnx.load(onnx_path).graph.initializer}
    m.load_state_dict({k: inits[k] for k in m.state_dict()})
    return m
