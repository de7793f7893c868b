#!/usr/bin/env python3
"""Writes tests/fixtures/rnn/: small torch.nn.LSTM / GRU / RNN models exported to ONNX by PyTorch,
with an input and PyTorch's outputs, for tests/test_rnn.cpp (crossbow's lowered LSTM/GRU/RNN
against PyTorch). Each case is <name>.onnx plus <name>_io.pb, a GraphProto whose initializers are
the inputs (in_0, ...) and the outputs (out_0, ...). Run with /usr/bin/python3 (torch, onnx)."""
import os

import onnx
import torch
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rnn")


class Wrap(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, *args):
        if len(args) == 1:
            y, state = self.rnn(args[0])
        else:
            y, state = self.rnn(args[0], tuple(args[1:]) if len(args) > 2 else args[1])
        return (y, *state) if isinstance(state, tuple) else (y, state)


def case(name, rnn, inputs, dynamic_batch_axis=None):
    torch.manual_seed(0)
    model = Wrap(rnn).eval()
    with torch.no_grad():
        outs = model(*inputs)
    in_names = [f"in_{i}" for i in range(len(inputs))]
    out_names = [f"out_{i}" for i in range(len(outs))]
    dyn = None
    if dynamic_batch_axis is not None:
        dyn = {"in_0": {dynamic_batch_axis: "batch"}}
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, tuple(inputs), path, opset_version=14, input_names=in_names,
                      output_names=out_names, dynamic_axes=dyn)
    g = onnx.GraphProto(name=name)
    for n, t in zip(in_names + out_names, list(inputs) + list(outs)):
        g.initializer.append(numpy_helper.from_array(t.detach().numpy(), n))
    with open(os.path.join(OUT, name + "_io.pb"), "wb") as f:
        f.write(g.SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(3, 4, bidirectional=True)
    case("lstm_bidirectional", lstm,
         [torch.randn(5, 2, 3), torch.randn(2, 2, 4), torch.randn(2, 2, 4)])
    torch.manual_seed(2)
    gru = torch.nn.GRU(3, 5, batch_first=True)
    case("gru_batch_first", gru, [torch.randn(2, 6, 3)], dynamic_batch_axis=0)
    torch.manual_seed(3)
    rnn = torch.nn.RNN(3, 4, num_layers=2)
    case("rnn_two_layers", rnn, [torch.randn(4, 3, 3)])


if __name__ == "__main__":
    main()
