#!/usr/bin/python3
"""Writes a copy of each ONNX model with its initializers turned into graph inputs of the same
type and shape: the zoo's graphs (every op, attribute and shape the importer infers) at a few KB
instead of a few hundred, small enough for the fuzz corpus (tests/fuzz_corpus/importer/).

  weights_as_inputs.py OUT_DIR MODEL.onnx...     (tools/fuzz/run.sh runs it when seeding)

A protobuf walker over the few fields it needs, so it runs without the onnx package: ModelProto
graph (7); GraphProto initializer (5), input (11); TensorProto dims (1), data_type (2), name (8).
"""
import os
import sys


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def enc_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        out.append(c | (0x80 if v else 0))
        if not v:
            return bytes(out)


def fields(b):
    """(number, wire type, value, raw bytes of the whole field) for each field of message b."""
    i = 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, v, b[start:i]


def field(num, payload):
    return enc_varint(num << 3 | 2) + enc_varint(len(payload)) + payload


def value_info(tensor):
    """The ValueInfoProto of an initializer: its name, element type and dims."""
    name, dtype, dims = b"", 1, []
    for num, wt, v, _ in fields(tensor):
        if num == 8:
            name = v
        elif num == 2:
            dtype = v
        elif num == 1 and wt == 0:
            dims.append(v)
        elif num == 1 and wt == 2:  # packed
            j = 0
            while j < len(v):
                d, j = varint(v, j)
                dims.append(d)
    shape = b"".join(field(1, enc_varint(1 << 3) + enc_varint(d)) for d in dims)
    tensor_type = enc_varint(1 << 3) + enc_varint(dtype) + field(2, shape)
    return field(1, name) + field(2, field(1, tensor_type))


def convert(model):
    out = bytearray()
    for num, wt, v, raw in fields(model):
        if num != 7:
            out += raw
            continue
        graph, inputs = bytearray(), bytearray()
        for gnum, _, gv, graw in fields(v):
            if gnum == 5:
                inputs += field(11, value_info(gv))
            else:
                graph += graw
        out += field(7, bytes(graph + inputs))
    return bytes(out)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            data = convert(f.read())
        name = os.path.basename(path).replace(".onnx", "_weights_as_inputs.onnx")
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
