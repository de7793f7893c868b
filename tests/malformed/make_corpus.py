#!/usr/bin/python3
"""Writes the malformed-model corpus: one tiny .onnx file per fault a bad model can have.

Run with /usr/bin/python3 (onnx 1.12):  /usr/bin/python3 tests/malformed/make_corpus.py
The files are committed; tests/test_malformed.cpp imports each one (and runs cb-inspect on it)
and asserts the specific error message. The checker is bypassed on purpose: every model here is
invalid in exactly one way. Output is deterministic (fixed seeds, no timestamps).
"""
import os
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opset=13, ir=8, extra_opsets=()):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, producer_name="make_corpus")
    m.ir_version = ir
    return m


def inp(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def write_bytes(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def write(name, m):
    write_bytes(name, m.SerializeToString())


def relu_model(**kw):
    """x [batch,4] -> Relu -> y: a valid base to break."""
    return model([helper.make_node("Relu", ["x"], ["y"], name="act")],
                 [inp("x", ["batch", 4])], [inp("y", ["batch", 4])], **kw)


def weight_model(tensor):
    """x [batch,4] + w (initializer) -> y."""
    return model([helper.make_node("Add", ["x", tensor.name], ["y"], name="add_w")],
                 [inp("x", ["batch", 4])], [inp("y", ["batch", 4])], inits=[tensor])


def ext_tensor(name, location, dims=(4,), offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = F
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def main():
    # ---- not a model at all ----------------------------------------------------------------
    write_bytes("empty.onnx", b"")
    big = model([helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
                [inp("x", ["batch", 64])], [inp("y", ["batch", 64])],
                inits=[numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")])
    data = big.SerializeToString()
    cut = data[: len(data) // 2]
    try:  # a truncated length-delimited field must not parse
        onnx.ModelProto().ParseFromString(cut)
        parsed = True
    except Exception:
        parsed = False
    assert not parsed, "truncated.onnx unexpectedly parses"
    write_bytes("truncated.onnx", cut)
    write_bytes("text_file.onnx", b"# this is a README, not a model\nname: resnet\nlayers: 18\n")
    rng = random.Random(1234)
    write_bytes("random_bytes.onnx", bytes(rng.randrange(256) for _ in range(512)))
    # A TensorProto saved with the wrong extension: parses, but holds no model.
    write_bytes("tensor_not_model.onnx",
                numpy_helper.from_array(np.ones((2, 2), np.float32), "t").SerializeToString())

    # ---- header: IR version, opsets, graph -------------------------------------------------
    m = onnx.ModelProto()
    m.ir_version = 8
    m.opset_import.add().version = 13
    m.producer_name = "make_corpus"
    write("no_graph.onnx", m)
    write("ir_version_10.onnx", relu_model(ir=10))
    write("opset_19.onnx", relu_model(opset=19))
    write("opset_6.onnx", relu_model(opset=6, ir=3))
    m = relu_model()
    del m.opset_import[:]
    m.opset_import.add().domain = "com.example"
    m.opset_import[0].version = 1
    write("no_default_opset.onnx", m)

    # ---- graph structure -------------------------------------------------------------------
    write("cycle.onnx", model(
        [helper.make_node("Relu", ["b_out"], ["a_out"], name="node_a"),
         helper.make_node("Sigmoid", ["a_out"], ["b_out"], name="node_b"),
         helper.make_node("Add", ["x", "b_out"], ["y"], name="join")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    write("used_before_produced.onnx", model(
        [helper.make_node("Sigmoid", ["h"], ["y"], name="second"),
         helper.make_node("Relu", ["x"], ["h"], name="first")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    write("never_produced.onnx", model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    write("duplicate_initializer.onnx", model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])], inits=[w, w]))
    write("duplicate_node_output.onnx", model(
        [helper.make_node("Relu", ["x"], ["h"], name="relu_1"),
         helper.make_node("Sigmoid", ["x"], ["h"], name="sigmoid_1"),
         helper.make_node("Neg", ["h"], ["y"], name="neg")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    write("output_not_produced.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4]), inp("nowhere", ["batch", 4])]))
    write("no_outputs.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="act")], [inp("x", ["batch", 4])], []))

    # ---- initializer data against its shape ------------------------------------------------
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.raw_data = t.raw_data[:10]
    write("raw_data_mismatch.onnx", weight_model(t))
    t = helper.make_tensor("w", F, [5], [1.0, 2.0, 3.0, 4.0, 5.0])
    t.dims[0] = 4
    write("float_data_mismatch.onnx", weight_model(t))
    t = helper.make_tensor("w", F, [4], [1.0, 2.0, 3.0, 4.0])
    t.dims[0] = -4
    write("negative_dim_initializer.onnx", weight_model(t))
    t = helper.make_tensor("w", F, [1, 4], [1.0, 2.0, 3.0, 4.0])
    t.dims[:] = [1 << 40, 1 << 40]
    write("overflow_dims_initializer.onnx", weight_model(t))
    t = helper.make_tensor("w", TensorProto.STRING, [4], [b"a", b"b", b"c", b"d"])
    write("string_initializer.onnx", weight_model(t))
    const = helper.make_tensor("c", F, [4], [1.0, 2.0, 3.0, 4.0])
    const.raw_data = b"\0" * 12
    del const.float_data[:]
    write("constant_raw_mismatch.onnx", model(
        [helper.make_node("Constant", [], ["k"], name="bias_const", value=const),
         helper.make_node("Add", ["x", "k"], ["y"], name="add_k")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))

    # ---- graph inputs ----------------------------------------------------------------------
    write("negative_dim_input.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        [inp("x", ["batch", -3])], [inp("y", ["batch", 4])]))
    write("overflow_dims_input.onnx", model(
        [helper.make_node("Flatten", ["x"], ["y"], name="flat")],
        [inp("x", ["batch", 1 << 40, 1 << 40])], [inp("y", ["batch", 4])]))
    write("symbolic_dim.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        [inp("x", ["batch", "features"])], [inp("y", ["batch", "features"])]))
    write("input_no_shape.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        [helper.make_tensor_value_info("x", F, None)], [inp("y", ["batch", 4])]))

    # ---- external data ---------------------------------------------------------------------
    write_bytes("ext_small.bin", np.arange(4, dtype=np.float32).tobytes())  # 16 bytes
    # ../CMakeLists.txt exists (tests/CMakeLists.txt): refused even though it is there.
    write("external_outside_relative.onnx", weight_model(ext_tensor("w", "../CMakeLists.txt")))
    write("external_outside_absolute.onnx", weight_model(ext_tensor("w", "/etc/hostname")))
    write("external_missing.onnx", weight_model(ext_tensor("w", "missing_weights.bin")))
    write("external_beyond_end.onnx",
          weight_model(ext_tensor("w", "ext_small.bin", offset=8, length=16)))

    # ---- ops crossbow does not support -----------------------------------------------------
    write("unknown_ops.onnx", model(
        [helper.make_node("StringNormalizer", ["x"], ["e"], name="mystery_strings"),
         helper.make_node("Relu", ["e"], ["r"], name="act"),
         helper.make_node("Bernoulli", ["r"], ["h"], name="mystery_bernoulli"),
         helper.make_node("FrobnicateOp", ["h"], ["y"], name="mystery_frobnicate")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    write("custom_domain.onnx", model(
        [helper.make_node("FusedGelu", ["x"], ["y"], name="fancy_gelu", domain="com.example")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])], extra_opsets=[("com.example", 1)]))

    # ---- shapes ----------------------------------------------------------------------------
    write("gemm_mismatch.onnx", model(
        [helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc1")],
        [inp("x", ["batch", 128])], [inp("y", ["batch", 10])],
        inits=[numpy_helper.from_array(np.zeros((64, 10), np.float32), "W"),
               numpy_helper.from_array(np.zeros(10, np.float32), "B")]))
    write("matmul_mismatch.onnx", model(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="proj")],
        [inp("x", ["batch", 8, 16])], [inp("y", ["batch", 8, 5])],
        inits=[numpy_helper.from_array(np.zeros((12, 5), np.float32), "W")]))
    write("add_mismatch.onnx", model(
        [helper.make_node("Add", ["x", "b"], ["y"], name="sum")],
        [inp("x", ["batch", 3])], [inp("y", ["batch", 3])],
        inits=[numpy_helper.from_array(np.zeros(4, np.float32), "b")]))
    write("conv_channels.onnx", model(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="conv1", kernel_shape=[3, 3])],
        [inp("x", ["batch", 3, 8, 8])], [inp("y", ["batch", 4, 6, 6])],
        inits=[numpy_helper.from_array(np.zeros((4, 2, 3, 3), np.float32), "W")]))
    write("reshape_count.onnx", model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="to_5")],
        [inp("x", ["batch", 3, 4])], [inp("y", ["batch", 5])],
        inits=[numpy_helper.from_array(np.array([0, 5], np.int64), "s")]))
    # Fuzzing found these accepted and read as float: a bias of another type.
    write("gemm_uint8_bias.onnx", model(
        [helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="fc")],
        [inp("x", ["batch", 3])], [inp("y", ["batch", 4])],
        inits=[numpy_helper.from_array(np.ones((3, 4), np.float32), "W"),
               numpy_helper.from_array(np.ones(4, np.uint8), "C")]))
    write("conv_int32_bias.onnx", model(
        [helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv")],
        [inp("x", ["batch", 1, 8, 8])], [inp("y", ["batch", 1, 6, 6])],
        inits=[numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "W"),
               numpy_helper.from_array(np.ones(1, np.int32), "B")]))
    # Fuzzing found these: SAME padding divides by the stride (SIGFPE on 0); a pool
    # kernel far larger than its SAME-padded input ran without end; ranks above the kernels' limit
    # were "internal error"s or named no node.
    write("conv_same_stride0.onnx", model(
        [helper.make_node("Conv", ["x", "W"], ["y"], name="c0", auto_pad="SAME_UPPER",
                          strides=[0, 1])],
        [inp("x", ["batch", 1, 8, 8])], [inp("y", ["batch", 1, 8, 8])],
        inits=[numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "W")]))
    write("maxpool_same_stride0.onnx", model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p0", auto_pad="SAME_LOWER",
                          kernel_shape=[3, 3], strides=[0, 0])],
        [inp("x", ["batch", 1, 8, 8])], [inp("y", ["batch", 1, 8, 8])]))
    write("avgpool_same_stride0.onnx", model(
        [helper.make_node("AveragePool", ["x"], ["y"], name="p1", auto_pad="SAME_UPPER",
                          kernel_shape=[3, 3], strides=[1, 0])],
        [inp("x", ["batch", 1, 8, 8])], [inp("y", ["batch", 1, 8, 8])]))
    # A hostile-input probe: windows of 2^40 per axis over an 8x8 input with SAME padding were
    # accepted, then looped over the padding without end. They are valid models, so cb-run must
    # run them promptly and right (kRuns in test_malformed.cpp); a window whose extent
    # (kernel_shape * dilations) overflows int64 is an error.
    huge = 1 << 40
    for name, op, extra in (("maxpool_huge_window.onnx", "MaxPool", {}),
                            ("avgpool_huge_window.onnx", "AveragePool", {}),
                            ("avgpool_huge_window_pad.onnx", "AveragePool",
                             {"count_include_pad": 1})):
        write(name, model(
            [helper.make_node(op, ["x"], ["y"], name="big", auto_pad="SAME_UPPER",
                              kernel_shape=[huge, huge], **extra)],
            [inp("x", [1, 1, 8, 8])], [inp("y", [1, 1, 8, 8])]))
    write("maxpool_window_overflow.onnx", model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="p_over", kernel_shape=[huge, 3],
                          dilations=[huge, 1])],
        [inp("x", [1, 1, 8, 8])], [inp("y", [1, 1, 8, 8])]))
    write("input_rank20.onnx", model(
        [helper.make_node("Relu", ["x"], ["y"], name="r0")],
        [inp("x", [1] * 20)], [inp("y", [1] * 20)]))
    write("initializer_rank12.onnx", model(
        [helper.make_node("Add", ["x", "c"], ["y"], name="a0")],
        [inp("x", [1])], [inp("y", [1] * 12)],
        inits=[numpy_helper.from_array(np.ones([1] * 12, np.float32), "c")]))
    write("reshape_rank12.onnx", model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="to_rank12")],
        [inp("x", [1])], [inp("y", [1] * 12)],
        inits=[numpy_helper.from_array(np.ones(12, np.int64), "s")]))
    write("transpose_perm20.onnx", model(
        [helper.make_node("Transpose", ["x"], ["y"], name="t0", perm=list(range(20)))],
        [inp("x", [2, 3])], [inp("y", [2, 3])]))
    write("wrong_arity.onnx", model(
        [helper.make_node("Relu", ["x", "x"], ["y"], name="act2")],
        [inp("x", ["batch", 4])], [inp("y", ["batch", 4])]))
    # a sixth input is crossbow's own (a fused residual), never a file's
    bn_params = [numpy_helper.from_array(np.ones(4, np.float32), n)
                 for n in ("scale", "b", "mean", "var")]
    write("batchnorm_six_inputs.onnx", model(
        [helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var", "x"], ["y"],
                          name="bn6")],
        [inp("x", ["batch", 4, 3, 3])], [inp("y", ["batch", 4, 3, 3])], inits=bn_params))


if __name__ == "__main__":
    main()
