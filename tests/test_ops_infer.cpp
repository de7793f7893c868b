// Unit tests of op inference on corner cases that the ONNX node test suite
// (test_onnx_node_shapes.cpp) does not reach: each builds a one-node model in memory, imports it
// unfolded and checks the output dtypes and shapes, or the error a spec violation gets.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <limits>
#include <string>
#include <vector>

#include "importer/onnx_importer.h"
#include "runtime/error.h"
#include "runtime/graph_builder.h"

using namespace cb;

namespace {

using TP = onnx::TensorProto;

// A model of one node; inputs are graph inputs (typed) or int64 initializers (known values).
class OneNode {
 public:
  OneNode(const std::string& op, int64_t opset) {
    m_.set_ir_version(8);
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_.mutable_graph()->set_name("g");
    node_ = m_.mutable_graph()->add_node();
    node_->set_op_type(op);
    node_->set_name("n");
  }
  OneNode& in(const std::string& name, int32_t elem, const std::vector<int64_t>& dims) {
    auto* vi = m_.mutable_graph()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* sh = tt->mutable_shape();
    for (int64_t d : dims) sh->add_dim()->set_dim_value(d);
    node_->add_input(name);
    return *this;
  }
  OneNode& ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TP::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    node_->add_input(name);
    return *this;
  }
  OneNode& floats(const std::string& name, const std::vector<float>& v) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(TP::FLOAT);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (float x : v) t->add_float_data(x);
    node_->add_input(name);
    return *this;
  }
  OneNode& none() {  // an omitted optional input
    node_->add_input("");
    return *this;
  }
  OneNode& attr(const std::string& name, const std::string& v) {
    auto* a = node_->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
    return *this;
  }
  OneNode& out(const std::string& name) {
    node_->add_output(name);
    m_.mutable_graph()->add_output()->set_name(name);
    return *this;
  }
  OneNode& attr(const std::string& name, int64_t v) {
    auto* a = node_->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
    return *this;
  }
  OneNode& attr(const std::string& name, const std::vector<int64_t>& v) {
    auto* a = node_->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
    return *this;
  }
  // "f32[1,1,3,3]" per graph output, space-separated.
  std::string infer() const {
    ImportOptions opts;
    opts.fold = false;
    ImportResult r = import_model_bytes(m_.SerializeAsString(), "one_node", "", opts);
    std::string out;
    for (ValueId v : r.graph.outputs) {
      const Value& val = r.graph.value(v);
      if (!out.empty()) out += ' ';
      out += dtype_name(val.dtype);
      out += to_string(val.shape);
    }
    return out;
  }
  // The import error's message ("" when the import succeeds).
  std::string error() const {
    try {
      infer();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

 private:
  onnx::ModelProto m_;
  onnx::NodeProto* node_;
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

}  // namespace

TEST_CASE("pooling ceil_mode drops a window that starts in the end padding") {
  // PyTorch MaxPool2d(2, 2, padding=1, ceil_mode=True) on 5x5 gives 3x3 (onnx/onnx#5741).
  auto pool = [](const std::vector<int64_t>& pads) {
    return OneNode("MaxPool", 13)
        .in("x", TP::FLOAT, {1, 1, 5, 5})
        .out("y")
        .attr("kernel_shape", std::vector<int64_t>{2, 2})
        .attr("strides", std::vector<int64_t>{2, 2})
        .attr("pads", pads)
        .attr("ceil_mode", 1)
        .infer();
  };
  CHECK(pool({1, 1, 1, 1}) == "f32[1,1,3,3]");
  CHECK(pool({0, 0, 0, 0}) == "f32[1,1,3,3]");
  CHECK(pool({0, 0, 1, 1}) == "f32[1,1,3,3]");
}

TEST_CASE(
    "pooling with huge windows, strides and pads: the shape, or an error naming the attribute") {
  // A hostile-input probe: every window attribute near the int64 limit. Shapes that fit come out
  // right; sizes whose arithmetic would overflow int64 are an error naming node and attribute.
  using V = std::vector<int64_t>;
  constexpr int64_t k40 = int64_t{1} << 40, k62 = int64_t{1} << 62;
  auto pool = [](const std::string& op) {
    OneNode n(op, 13);
    n.in("x", TP::FLOAT, {1, 1, 8, 8}).out("y");
    return n;
  };
  for (const char* op : {"MaxPool", "AveragePool"}) {
    CAPTURE(op);
    const std::string node = fmt::format("[{} node 'n']", op);
    // SAME padding keeps 8x8 whatever the window
    for (const char* pad : {"SAME_UPPER", "SAME_LOWER"})
      CHECK(pool(op).attr("auto_pad", pad).attr("kernel_shape", V{k40, k40}).infer() ==
            "f32[1,1,8,8]");
    // one window per axis, whatever the stride (ceil_mode too: no int64 overflow on the way)
    CHECK(pool(op)
              .attr("kernel_shape", V{3, 3})
              .attr("strides", V{k62, kMax})
              .attr("pads", V{1, 1, 1, 1})
              .infer() == "f32[1,1,1,1]");
    CHECK(pool(op)
              .attr("kernel_shape", V{3, 3})
              .attr("strides", V{kMax, kMax})
              .attr("ceil_mode", 1)
              .infer() == "f32[1,1,1,1]");
    CHECK(pool(op)
              .attr("auto_pad", "SAME_UPPER")
              .attr("kernel_shape", V{3, 3})
              .attr("strides", V{kMax, k62})
              .infer() == "f32[1,1,1,1]");
    // pads beyond any input
    const std::string pads = pool(op)
                                 .attr("kernel_shape", V{3, 3})
                                 .attr("strides", V{k62, k62})
                                 .attr("pads", V{k62, 0, k62, 0})
                                 .error();
    CHECK(contains(pads, node));
    CHECK(contains(pads, "pads"));
    // a window whose span overflows int64: kernel_shape * dilations (MaxPool), or SAME pads
    // derived from a window too large
    if (std::string_view(op) == "MaxPool") {
      const std::string span =
          pool(op).attr("kernel_shape", V{k40, 3}).attr("dilations", V{k40, 1}).error();
      CHECK(contains(span, node));
      CHECK(contains(span, "kernel_shape"));
      CHECK(contains(span, "dilations"));
      const std::string same = pool(op)
                                   .attr("auto_pad", "SAME_UPPER")
                                   .attr("kernel_shape", V{kMax, 3})
                                   .attr("dilations", V{kMax, 1})
                                   .error();
      CHECK(contains(same, node));
      CHECK(contains(same, "kernel_shape"));
    }
    const std::string kernel = pool(op).attr("kernel_shape", V{kMax, kMax}).error();
    CHECK(contains(kernel, node));
    CHECK(contains(kernel, "kernel_shape"));
  }
}

TEST_CASE("MaxPool takes int8/uint8 from opset 12") {
  auto pool = [](int64_t opset, int32_t elem) {
    return OneNode("MaxPool", opset)
        .in("x", elem, {1, 1, 4, 4})
        .out("y")
        .attr("kernel_shape", std::vector<int64_t>{2, 2});
  };
  CHECK(pool(12, TP::UINT8).infer() == "u8[1,1,3,3]");
  CHECK(pool(12, TP::INT8).infer() == "i8[1,1,3,3]");
  CHECK(contains(pool(11, TP::UINT8).error(), "floating point"));
  CHECK(contains(OneNode("AveragePool", 13)
                     .in("x", TP::UINT8, {1, 1, 4, 4})
                     .out("y")
                     .attr("kernel_shape", std::vector<int64_t>{2, 2})
                     .error(),
                 "floating point"));
}

TEST_CASE("Pow: integer bases and mixed exponent types from opset 12") {
  auto pow = [](int64_t opset, int32_t x, int32_t y) {
    return OneNode("Pow", opset).in("x", x, {3}).in("y", y, {1}).out("z");
  };
  CHECK(pow(15, TP::INT64, TP::FLOAT).infer() == "i64[3]");
  CHECK(pow(12, TP::FLOAT, TP::INT32).infer() == "f32[3]");
  CHECK(contains(pow(11, TP::FLOAT, TP::DOUBLE).error(), "same type"));
  CHECK(contains(pow(11, TP::INT64, TP::INT64).error(), "floating point"));
  CHECK(contains(pow(15, TP::UINT8, TP::FLOAT).error(), "int32, int64 or a floating point"));
  CHECK(contains(pow(15, TP::FLOAT, TP::BOOL).error(), "numeric"));
}

TEST_CASE("Slice clamps like the spec, also at the edges") {
  auto slice = [](std::vector<int64_t> dims, int64_t start, int64_t end, int64_t step) {
    return OneNode("Slice", 13)
        .in("x", TP::FLOAT, dims)
        .ints("starts", {start})
        .ints("ends", {end})
        .ints("axes", {0})
        .ints("steps", {step})
        .out("y")
        .infer();
  };
  CHECK(slice({5}, -1, kMin, -2) == "f32[3]");  // 4, 2, 0
  CHECK(slice({5}, -1, kMin, -1) == "f32[5]");
  CHECK(slice({5}, 3, 0, -3) == "f32[1]");
  CHECK(slice({5}, 0, kMax, kMax) == "f32[1]");      // no overflow on a huge step
  CHECK(slice({5}, -1, kMin, kMin) == "f32[1]");     // nor on the most negative one
  CHECK(slice({0, 2}, -1, kMin, -1) == "f32[0,2]");  // an empty dim stays empty
  CHECK(slice({0, 2}, 0, kMax, 1) == "f32[0,2]");
  CHECK(slice({5}, 2, 2, 1) == "f32[0]");
}

TEST_CASE("Split-18 with num_outputs: ceil-sized chunks, the last one smaller") {
  auto split = [](int64_t dim, int64_t n) {
    OneNode node("Split", 18);
    node.in("x", TP::FLOAT, {dim, 2}).attr("num_outputs", n);
    for (int64_t i = 0; i < n; ++i) node.out("y" + std::to_string(i));
    return node;
  };
  CHECK(split(7, 3).infer() == "f32[3,2] f32[3,2] f32[1,2]");
  CHECK(split(6, 3).infer() == "f32[2,2] f32[2,2] f32[2,2]");
  CHECK(split(4, 3).infer() == "f32[2,2] f32[2,2] f32[0,2]");
  CHECK(contains(split(5, 4).error(), "the last would be -1"));
  CHECK(contains(OneNode("Split", 18)
                     .in("x", TP::FLOAT, {4})
                     .ints("split", {2, 2})
                     .attr("num_outputs", 2)
                     .out("a")
                     .out("b")
                     .error(),
                 "give one"));
  CHECK(contains(OneNode("Split", 13).in("x", TP::FLOAT, {5}).out("a").out("b").error(),
                 "does not split evenly"));
}

TEST_CASE("SoftmaxCrossEntropyLoss: N-D scores and class weights, and the shapes they must have") {
  auto sce = [](std::vector<int64_t> labels, int32_t wtype, std::vector<int64_t> w) {
    OneNode n("SoftmaxCrossEntropyLoss", 13);
    n.in("x", TP::FLOAT, {2, 5, 3, 4}).in("y", TP::INT64, labels).in("w", wtype, w);
    return n.out("loss").out("log_prob");
  };
  CHECK(sce({2, 3, 4}, TP::FLOAT, {5}).infer() == "f32[] f32[2,5,3,4]");
  CHECK(contains(sce({2, 5, 4}, TP::FLOAT, {5}).error(),
                 "labels [2,5,4] must be [2,3,4] for scores [2,5,3,4]"));
  CHECK(contains(sce({2, 3, 4}, TP::FLOAT, {4}).error(), "weights [4] must be [C] = [5]"));
  CHECK(contains(sce({2, 3, 4}, TP::DOUBLE, {5}).error(), "weights are f64, scores f32"));
  CHECK(contains(OneNode("SoftmaxCrossEntropyLoss", 13)
                     .in("x", TP::FLOAT, {5})
                     .in("y", TP::INT64, {5})
                     .out("loss")
                     .error(),
                 "scores must be [N,C] or [N,C,d1,...], got [5]"));
}

TEST_CASE("Reduce* take axes as an input from opset 18, with noop_with_empty_axes") {
  auto reduce = [](const std::string& op, int64_t opset) {
    OneNode n(op, opset);
    n.in("x", TP::FLOAT, {2, 3, 4});
    return n;
  };
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}) {
    CAPTURE(op);
    CHECK(reduce(op, 18).ints("axes", {-1, 0}).out("y").attr("keepdims", 0).infer() == "f32[3]");
    CHECK(reduce(op, 18).out("y").attr("noop_with_empty_axes", 1).infer() == "f32[2,3,4]");
    CHECK(reduce(op, 13).out("y").attr("axes", std::vector<int64_t>{1}).infer() == "f32[2,1,4]");
    CHECK(contains(reduce(op, 13).ints("axes", {1}).out("y").error(), "attribute before opset 18"));
    CHECK(contains(reduce(op, 18).ints("axes", {1, -2}).out("y").error(), "listed twice"));
  }
}

TEST_CASE("Max/Min take integers from opset 12; comparisons and logic give bool") {
  auto two = [](const std::string& op, int64_t opset, int32_t t) {
    return OneNode(op, opset).in("a", t, {2, 1}).in("b", t, {3}).out("y");
  };
  CHECK(two("Max", 12, TP::INT32).infer() == "i32[2,3]");
  CHECK(contains(two("Min", 11, TP::INT32).error(), "floating point"));
  CHECK(contains(two("Mean", 13, TP::INT64).error(), "floating point"));
  CHECK(OneNode("Sum", 13)
            .in("a", TP::FLOAT, {4})
            .in("b", TP::FLOAT, {2, 1})
            .in("c", TP::FLOAT, {})
            .out("y")
            .infer() == "f32[2,4]");
  CHECK(
      contains(OneNode("Max", 13).in("a", TP::FLOAT, {4}).in("b", TP::FLOAT, {3}).out("y").error(),
               "do not broadcast"));
  CHECK(two("GreaterOrEqual", 12, TP::UINT8).infer() == "bool[2,3]");
  CHECK(contains(two("Greater", 7, TP::UINT8).error(), "before opset 9"));
  CHECK(contains(two("Less", 13, TP::BOOL).error(), "numeric"));
  CHECK(two("Xor", 7, TP::BOOL).infer() == "bool[2,3]");
  CHECK(contains(two("And", 7, TP::INT32).error(), "must be bool"));
  CHECK(contains(OneNode("Not", 7).in("x", TP::FLOAT, {2}).out("y").error(), "must be bool"));
}

TEST_CASE("Tile: output dims are input dims times repeats") {
  auto tile = [](std::vector<int64_t> dims, std::vector<int64_t> reps) {
    return OneNode("Tile", 13).in("x", TP::FLOAT, dims).ints("r", reps).out("y");
  };
  CHECK(tile({2, 3}, {2, 1}).infer() == "f32[4,3]");
  CHECK(tile({2, 3}, {0, 5}).infer() == "f32[0,15]");
  CHECK(tile({}, {}).infer() == "f32[]");
  CHECK(contains(tile({2, 3}, {2}).error(), "repeats has 1 values"));
  CHECK(contains(tile({2, 3}, {2, -1}).error(), "must not be negative"));
}

// Shape arithmetic through the new ops folds at import time (known contents, in terms of N).
TEST_CASE("comparisons, logic, Max/Min/Sum, Tile and reductions fold known integers") {
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "t");
  auto known = [&](ValueId v) -> std::string {
    const auto& k = g.value(v).known;
    return k ? to_string(Shape(*k)) : "unknown";
  };
  ValueId nshape = b.shape_of({Dim::N(), Dim::of(3), Dim::of(4)});
  ValueId ab = b.ints({4, 1, 3});
  CHECK(known(b.op("Greater", {ab, b.ints({2, 2, 3})})) == "[1,0,0]");
  CHECK(known(b.op("LessOrEqual", {ab, b.ints({3})})) == "[0,1,1]");
  CHECK(known(b.op("Less", {nshape, b.ints({2})})) == "unknown");  // N < 2 depends on N
  CHECK(known(b.op("Greater", {b.shape_of({Dim::N(2)}), b.shape_of({Dim::N()})})) == "[1]");
  // Equal of N with a constant: never true for N >= 1 unless the constant is a positive multiple.
  CHECK(known(b.op("Equal", {nshape, b.ints({-1, 3, 5})})) == "[0,1,0]");
  CHECK(known(b.op("Equal", {b.shape_of({Dim::N(2)}), b.ints({3})})) == "[0]");
  CHECK(known(b.op("Equal", {nshape, b.ints({3})})) == "unknown");  // N == 3 depends on N
  CHECK(known(b.op("Equal", {b.shape_of({Dim::N(2)}), b.ints({4})})) == "unknown");
  // PyTorch's export of x.expand(N, -1, -1) (a ViT's class token): Where(shape == -1, 1, shape).
  ValueId want = b.shape_of({Dim::N(), Dim::of(-1), Dim::of(-1)});
  ValueId minus = b.ints({-1, -1, -1});
  CHECK(known(b.op("Where", {b.op("Equal", {want, minus}), b.ints({1, 1, 1}), want})) == "[N,1,1]");
  ValueId ge = b.op("GreaterOrEqual", {ab, b.ints({3})});
  CHECK(known(b.op("Not", {ge})) == "[0,1,0]");
  CHECK(known(b.op("And", {ge, b.op("Less", {ab, b.ints({4})})})) == "[0,0,1]");
  CHECK(known(b.op("Max", {ab, b.ints({2})})) == "[4,2,3]");
  CHECK(known(b.op("Min", {ab, b.ints({2}), b.ints({3, 0, 5})})) == "[2,0,2]");
  CHECK(known(b.op("Max", {nshape, b.ints({1})})) == "unknown");
  CHECK(known(b.op("Sum", {nshape, nshape, b.ints({1})})) == "unknown");  // 2N + 1
  CHECK(known(b.op("Sum", {nshape, nshape})) == "[2N,6,8]");
  CHECK(known(b.op("ReduceProd", {nshape}, {{"keepdims", int64_t{0}}})) == "[12N]");
  CHECK(known(b.op("ReduceMax", {ab}, {{"keepdims", int64_t{1}}})) == "[4]");
  CHECK(known(b.op("ReduceMin", {ab}, {{"keepdims", int64_t{0}}})) == "[1]");
  CHECK(known(b.op("ReduceSum", {nshape}, {{"keepdims", int64_t{0}}})) == "unknown");  // N + 7
  CHECK(known(b.op("ReduceSum", {b.ints({2, 5})}, {{"keepdims", int64_t{0}}})) == "[7]");
  ValueId tiled = b.op("Tile", {b.ints({2, 5}), b.ints({3})});
  CHECK(known(tiled) == "[2,5,2,5,2,5]");
  CHECK(to_string(
            g.value(b.op("Tile", {b.ints({1, 2, 3, 4, 5, 6, 7}), b.shape_of({Dim::N()})})).shape) ==
        "[7N]");
  CHECK(to_string(g.value(tiled).shape) == "[6]");
  CHECK(to_string(g.value(b.op("Tile", {b.ints({7}), b.shape_of({Dim::N()})})).shape) == "[N]");
}

TEST_CASE("ConvTranspose: output shapes from pads, output_padding, output_shape and auto_pad") {
  auto ct = [](const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
    OneNode n("ConvTranspose", 11);
    n.in("x", TP::FLOAT, x).in("w", TP::FLOAT, w).out("y");
    return n;
  };
  using V = std::vector<int64_t>;
  CHECK(ct({1, 1, 3, 3}, {1, 2, 3, 3}).infer() == "f32[1,2,5,5]");
  CHECK(ct({1, 1, 3, 3}, {1, 2, 3, 3})
            .attr("strides", V{3, 2})
            .attr("output_padding", V{1, 1})
            .infer() == "f32[1,2,10,8]");
  CHECK(
      ct({1, 1, 3, 3}, {1, 2, 3, 3}).attr("strides", V{3, 2}).attr("pads", V{1, 2, 1, 2}).infer() ==
      "f32[1,2,7,3]");
  CHECK(ct({1, 1, 3, 3}, {1, 2, 3, 3})
            .attr("strides", V{3, 2})
            .attr("output_shape", V{10, 8})
            .infer() == "f32[1,2,10,8]");
  CHECK(ct({1, 1, 3, 3}, {1, 2, 3, 3})
            .attr("strides", V{2, 2})
            .attr("auto_pad", std::string("SAME_UPPER"))
            .infer() == "f32[1,2,6,6]");
  CHECK(ct({1, 4, 3}, {4, 3, 2}).attr("group", 2).infer() == "f32[1,6,4]");
  CHECK(contains(ct({1, 1, 3, 3}, {1, 2, 3, 3}).attr("output_padding", V{1, 1}).error(),
                 "output_padding 1 must be less than the stride 1 or the dilation 1"));
  CHECK(contains(ct({1, 2, 3, 3}, {1, 2, 3, 3}).error(), "has 2 channels but W"));
  CHECK(contains(ct({1, 1, 3, 3}, {1, 2, 3, 3}).attr("pads", V{3, 0, 3, 0}).error(), "below zero"));
}

TEST_CASE("Resize: output shapes, and what is rejected") {
  auto rs = [](int64_t opset) {
    OneNode n("Resize", opset);
    n.in("x", TP::FLOAT, {1, 2, 4, 6});
    return n;
  };
  CHECK(rs(13).none().floats("scales", {1, 1, 2, 0.5f}).out("y").infer() == "f32[1,2,8,3]");
  CHECK(rs(13).none().none().ints("sizes", {1, 2, 3, 7}).out("y").infer() == "f32[1,2,3,7]");
  CHECK(rs(10).floats("scales", {1, 1, 1.5f, 1.5f}).out("y").infer() == "f32[1,2,6,9]");
  CHECK(
      rs(11).floats("roi", {}).floats("scales", {}).ints("sizes", {1, 2, 2, 2}).out("y").infer() ==
      "f32[1,2,2,2]");
  CHECK(rs(18)
            .none()
            .none()
            .ints("sizes", {5, 2})
            .attr("axes", std::vector<int64_t>{-1, 2})
            .out("y")
            .infer() == "f32[1,2,2,5]");
  CHECK(contains(
      rs(10).floats("scales", {1, 1, 2, 2}).out("y").attr("mode", std::string("cubic")).error(),
      "mode 'cubic' needs opset 11"));
  CHECK(contains(rs(13)
                     .none()
                     .floats("scales", {1, 1, 2, 2})
                     .out("y")
                     .attr("mode", std::string("bicubic"))
                     .error(),
                 "mode 'bicubic' is not one of nearest, linear, cubic"));
  CHECK(contains(rs(13)
                     .floats("roi", {0, 0, 0, 0, 1, 1, 1, 1})
                     .none()
                     .ints("sizes", {1, 2, 3, 3})
                     .out("y")
                     .attr("coordinate_transformation_mode", std::string("tf_crop_and_resize"))
                     .error(),
                 "'tf_crop_and_resize' is not supported"));
  CHECK(contains(rs(18).none().floats("scales", {1, 1, 2, 2}).out("y").attr("antialias", 1).error(),
                 "antialiased resizing is not supported"));
  CHECK(contains(rs(13).none().in("s", TP::FLOAT, {4}).out("y").error(), "must be a constant"));
  CHECK(
      contains(rs(13).none().floats("scales", {1, 1, 2}).out("y").error(), "scales has 3 values"));
  CHECK(contains(
      rs(13).none().floats("scales", {1, 1, 2, 2}).ints("sizes", {1, 2, 3, 3}).out("y").error(),
      "not both"));
}

TEST_CASE("BatchNormalization gives at most 5 outputs in a file; the sixth is crossbow's own") {
  auto bn = [](int outputs) {
    OneNode n("BatchNormalization", 9);
    n.in("x", TP::FLOAT, {2, 3, 4, 4});
    for (const char* p : {"scale", "b", "mean", "var"}) n.floats(p, {1, 1, 1});
    for (int i = 0; i < outputs; ++i) n.out("y" + std::to_string(i));
    return n;
  };
  CHECK(bn(5).infer() == "f32[2,3,4,4] f32[3] f32[3] f32[3] f32[3]");
  CHECK(contains(bn(6).error(), "has 6 outputs; BatchNormalization gives at most 5"));
}
