#!/usr/bin/python3
"""Models and NumPy data sets for the tensor-data tests (tests/test_tensor_data.cpp), made with
PyTorch 1.13 and NumPy as a user would: a model exported to ONNX, train.npz and val.npz.

  tensor_models.py regressor DIR   MLP 4 -> 1 on a smooth function (x, y float32)
  tensor_models.py tagger DIR      embedding + GRU + linear: int64 tokens [N,T] -> [N,T,V]; the
                                   target is the previous token (shifted copy), padding and the
                                   first position -100 (ignored)
  tensor_models.py ownloss DIR     an MLP exported with its loss: inputs x, y; outputs pred, loss
  tensor_models.py features DIR    features for a model of another framework: x [N,3,48,192]
                                   float16, y int64 (a left/right brightness task)
Each writes DIR/model.onnx (not for features), DIR/train.npz and DIR/val.npz; seeds are fixed.
"""
import sys

import numpy as np
import torch


def smooth(x):
    return np.sin(2 * x[:, 0]) * np.cos(x[:, 1]) + 0.5 * x[:, 2] ** 2 - 0.3 * x[:, 3]


def regressor(d):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1.5, 1.5, size=(5000, 4)).astype(np.float32)
    y = smooth(x).astype(np.float32)[:, None]
    np.savez(f"{d}/train.npz", x=x[:4000], y=y[:4000])
    np.savez(f"{d}/val.npz", x=x[4000:], y=y[4000:])
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                            torch.nn.Tanh(), torch.nn.Linear(64, 1))
    torch.onnx.export(m, torch.zeros(2, 4), f"{d}/model.onnx", input_names=["x"],
                      output_names=["y_hat"], dynamic_axes={"x": {0: "N"}, "y_hat": {0: "N"}},
                      opset_version=17)


class Tagger(torch.nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.gru(self.emb(tokens))
        return self.out(h)


def tagger(d, vocab=12, length=12, count=5000):
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, vocab, size=(count, length)).astype(np.int64)
    lengths = rng.integers(4, length + 1, size=count)
    target = np.full((count, length), -100, dtype=np.int64)
    for i, n in enumerate(lengths):
        tokens[i, n:] = 0  # padding
        target[i, 1:n] = tokens[i, : n - 1]
    split = 4000
    np.savez(f"{d}/train.npz", tokens=tokens[:split], y=target[:split])
    np.savez(f"{d}/val.npz", tokens=tokens[split:], y=target[split:])
    torch.manual_seed(0)
    m = Tagger(vocab, 48)
    torch.onnx.export(m, torch.zeros(2, length, dtype=torch.int64), f"{d}/model.onnx",
                      input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "N"}, "logits": {0: "N"}}, opset_version=17)


class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(),
                                       torch.nn.Linear(32, 1))

    def forward(self, x, y):
        pred = self.net(x)
        return pred, torch.mean((pred - y) * (pred - y))


def ownloss(d):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.5, 1.5, size=(3000, 4)).astype(np.float32)
    y = smooth(x).astype(np.float32)[:, None]
    np.savez(f"{d}/train.npz", x=x[:2500], y=y[:2500])
    np.savez_compressed(f"{d}/val.npz", x=x[2500:], y=y[2500:])
    torch.manual_seed(0)
    torch.onnx.export(WithLoss(), (torch.zeros(2, 4), torch.zeros(2, 1)), f"{d}/model.onnx",
                      input_names=["x", "y"], output_names=["pred", "loss"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}, "pred": {0: "N"}},
                      opset_version=17)


def features(d, count=400):
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 0.3, size=(count, 3, 48, 192)).astype(np.float32)
    y = rng.integers(0, 2, size=count).astype(np.int64)
    for i in range(count):  # the bright half says the class
        if y[i] == 0:
            x[i, :, :, :96] += 0.6
        else:
            x[i, :, :, 96:] += 0.6
    split = count * 3 // 4
    x = x.astype(np.float16)  # half the bytes; fed to the model's f32 input as f32
    np.savez(f"{d}/train.npz", x=x[:split], y=y[:split])
    np.savez(f"{d}/val.npz", x=x[split:], y=y[split:])


if __name__ == "__main__":
    {"regressor": regressor, "tagger": tagger, "ownloss": ownloss,
     "features": features}[sys.argv[1]](sys.argv[2])
