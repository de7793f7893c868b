// The ops the importer lowers into other catalog ops (OpDef::lower): LSTM, GRU and RNN against
// PyTorch (models exported by torch.onnx from torch.nn.LSTM/GRU/RNN, outputs recorded by
// tests/rnn_fixtures.py into tests/fixtures/rnn/), their parameters trainable; If with a
// condition known at import (the branch inlined) and one known only at run time (both branches
// and a Where), forward and gradient; the clear refusals. Finite-difference checks of the
// lowered graphs are in test_gradcheck.cpp, the ONNX node suite in test_onnx_conformance.cpp.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "autodiff/autodiff.h"
#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/executor.h"
#include "runtime/op_catalog.h"
#include "tests/fixture_io.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(CB_SOURCE_DIR) / "tests" / "fixtures" / "rnn";

double max_err(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims == want.dims);
  double e = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    e = std::max(e, std::abs(got.real_at(i) - want.real_at(i)));
  return e;
}

int count_op(const Graph& g, std::string_view op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

Tensor f32(std::vector<int64_t> dims, std::vector<float> v) {
  return testing::tensor_of(DType::F32, std::move(dims), v);
}
Tensor boolean(bool b) { return testing::tensor_of(DType::Bool, {}, std::vector<uint8_t>{b}); }

// ---- small ONNX models built here -----------------------------------------------------------

void add_tensor_input(onnx::GraphProto& g, const std::string& name, int elem,
                      std::vector<int64_t> dims) {
  auto* in = g.add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op,
                          std::vector<std::string> inputs, std::vector<std::string> outputs) {
  auto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(outputs.at(0) + "_node");
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

void add_float_init(onnx::GraphProto& g, const std::string& name, std::vector<float> v) {
  auto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (float x : v) t->add_float_data(x);
}

// A branch computing `local = op(x, w)`, `out = Mul(local, 2)`: the same local names in both
// branches, read outer-scope x and w by name.
onnx::GraphProto branch(const std::string& name, const std::string& op) {
  onnx::GraphProto b;
  b.set_name(name);
  add_float_init(b, "two", {2.0f});
  add_node(b, op, {"x", "w"}, {"local"});
  add_node(b, "Mul", {"local", "two"}, {"out"});
  b.add_output()->set_name("out");
  return b;
}

// loss = ReduceSum(If(cond, then: (x*w)*2, else: (x+w)*2)), w a trainable initializer. With
// `constant_cond` the condition is a Constant node (true); otherwise the graph input `cond`.
std::string if_model(bool constant_cond) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto& g = *m.mutable_graph();
  g.set_name("if_test");
  add_tensor_input(g, "x", onnx::TensorProto::FLOAT, {3});
  add_float_init(g, "w", {0.5f, -1.0f, 2.0f});
  if (constant_cond) {
    auto* c = add_node(g, "Constant", {}, {"cond"});
    auto* a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
    a->mutable_t()->add_int32_data(1);
  } else {
    add_tensor_input(g, "cond", onnx::TensorProto::BOOL, {});
  }
  auto* n = add_node(g, "If", {"cond"}, {"y"});
  for (auto [attr, op] : {std::pair{"then_branch", "Mul"}, std::pair{"else_branch", "Add"}}) {
    auto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(attr, op);
  }
  add_node(g, "ReduceSum", {"y"}, {"loss"})->add_attribute()->set_name("keepdims");
  g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_i(0);
  g.add_output()->set_name("loss");
  g.add_output()->set_name("y");
  return m.SerializeAsString();
}

// Forward outputs and d loss / d w of an imported model with one parameter.
struct Run {
  std::vector<Tensor> outputs;
  Tensor grad_w;
};
Run train_step(const Graph& g, const std::map<std::string, Tensor>& feeds, Device& dev) {
  Run r;
  TrainingGraph t = build_training_graph(g, {LossKind::ModelOutput, "loss"});
  REQUIRE(t.params.size() == 1);
  Executor ex(t.graph, dev, 1);
  for (size_t i = 0; i < t.graph.inputs.size(); ++i)
    ex.set_input(i, feeds.at(t.graph.value(t.graph.inputs[i]).name));
  ex.run();
  Executor fwd(g, dev, 1);
  for (size_t i = 0; i < g.inputs.size(); ++i)
    fwd.set_input(i, feeds.at(g.value(g.inputs[i]).name));
  fwd.run();
  for (size_t i = 0; i < g.outputs.size(); ++i) r.outputs.push_back(fwd.output(i));
  r.grad_w = ex.output(2);
  return r;
}

}  // namespace

TEST_CASE("LSTM, GRU and RNN equal PyTorch's torch.nn.LSTM/GRU/RNN") {
  auto dev = make_cpu_device(2);
  // name, number of recurrent nodes, trainable parameter elements (PyTorch's count)
  struct Case {
    const char* name;
    const char* op;
    int nodes;
    int64_t params;
  };
  for (const Case& c : {Case{"lstm_bidirectional", "LSTM", 1, 2 * (16 * 3 + 16 * 4 + 32)},
                        Case{"gru_batch_first", "GRU", 1, 15 * 3 + 15 * 5 + 30},
                        Case{"rnn_two_layers", "RNN", 2, (4 * 3 + 4 * 4 + 8) + (4 * 4 * 2 + 8)}}) {
    CAPTURE(c.name);
    fs::path model = kFixtures / (std::string(c.name) + ".onnx");
    if (!test::need(model, "tests/fixtures/rnn (written by tests/rnn_fixtures.py)")) continue;
    auto io = test::read_fixture(kFixtures / (std::string(c.name) + "_io.pb"));
    ImportResult r = import_model(model.string());
    const Graph& g = r.graph;
    CHECK(count_op(g, c.op) == 0);  // lowered
    CHECK(count_op(g, "MatMul") >= 2 * c.nodes);
    // W, R and B are trainable parameters, as PyTorch's weights and biases are.
    CHECK(param_stats(g).count == c.params);
    const Tensor& x = io.at("in_0");
    int64_t batch = g.value(g.inputs[0]).shape[0].batch ? x.dims[0] : 1;
    Executor ex(g, *dev, batch);
    for (size_t i = 0; i < g.inputs.size(); ++i) ex.set_input(i, io.at(g.value(g.inputs[i]).name));
    ex.run();
    REQUIRE(g.outputs.size() >= 2);
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      CAPTURE(i);
      CHECK(max_err(ex.output(i), io.at(fmt::format("out_{}", i))) <= 2e-6);
    }
    // And it trains: every parameter gets a gradient.
    ValueId y = g.outputs[0];
    CHECK_NOTHROW(build_training_graph(g, {LossKind::MeanSquaredError, g.value(y).name}));
  }
}

TEST_CASE("GRU with a symbolic batch: the fixture exported with a dynamic batch axis runs at 4") {
  fs::path model = kFixtures / "gru_batch_first.onnx";
  if (!test::need(model, "tests/fixtures/rnn (written by tests/rnn_fixtures.py)")) return;
  ImportResult r = import_model(model.string());
  REQUIRE(r.graph.value(r.graph.inputs[0]).shape[0].batch);
  auto dev = make_cpu_device(1);
  auto io = test::read_fixture(kFixtures / "gru_batch_first_io.pb");
  // Batch 4 = the fixture's two sequences twice: each row's outputs equal the fixture's.
  Tensor x = io.at("in_0"), x4 = x;
  x4.dims[0] = 4;
  x4.bytes.insert(x4.bytes.end(), x.bytes.begin(), x.bytes.end());
  Executor ex(r.graph, *dev, 4);
  ex.set_input(0, x4);
  ex.run();
  Tensor y = ex.output(0), want = io.at("out_0");
  REQUIRE(y.dims == std::vector<int64_t>{4, 6, 5});  // PyTorch's [B,T,H]
  for (int64_t i = 0; i < y.numel(); ++i)
    CHECK(std::abs(y.real_at(i) - want.real_at(i % want.numel())) <= 2e-6);
}

TEST_CASE("recurrent ops refuse what they do not support, naming the node") {
  auto model = [](const std::string& attr_name, const std::string& value, bool seq_lens,
                  int64_t hidden = 2) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(14);
    auto& g = *m.mutable_graph();
    g.set_name("lstm");
    add_tensor_input(g, "X", onnx::TensorProto::FLOAT, {3, 2, 4});
    add_tensor_input(g, "W", onnx::TensorProto::FLOAT, {1, 2, 4});
    add_tensor_input(g, "R", onnx::TensorProto::FLOAT, {1, 2, 2});
    std::vector<std::string> ins = {"X", "W", "R"};
    if (seq_lens) {
      auto* t = g.add_initializer();
      t->set_name("lens");
      t->set_data_type(onnx::TensorProto::INT32);
      t->add_dims(2);
      t->add_int32_data(3);
      t->add_int32_data(2);
      ins.insert(ins.end(), {"", "lens"});
    }
    auto* n = add_node(g, "RNN", ins, {"Y"});
    n->set_name("rnn1");
    auto* a = n->add_attribute();
    a->set_name("hidden_size");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(hidden);
    if (!attr_name.empty()) {
      auto* b = n->add_attribute();
      b->set_name(attr_name);
      b->set_type(onnx::AttributeProto::STRINGS);
      b->add_strings(value);
    }
    g.add_output()->set_name("Y");
    return m.SerializeAsString();
  };
  auto import = [](const std::string& bytes) {
    return test::error_of([&] { import_model_bytes(bytes, "m.onnx", ""); });
  };
  std::string e = import(model("activations", "Softsign", false));
  CHECK(test::contains(e, "[RNN node 'rnn1']"));
  CHECK(test::contains(e, "activation 'Softsign' is not supported"));
  e = import(model("", "", true));
  CHECK(test::contains(e, "[RNN node 'rnn1']"));
  CHECK(test::contains(e, "sequence_lens holds 2, but X's sequence length is 3"));
  e = import(model("", "", false, 3));  // hidden_size 3 but R says 2
  CHECK(test::contains(e, "W (input 1 'W') has shape [1,2,4], expected [1,3,4]"));
  CHECK_NOTHROW(import_model_bytes(model("activations", "relu", false), "m.onnx", ""));
}

TEST_CASE("If with a condition known at import becomes the chosen branch") {
  ImportResult r = import_model_bytes(if_model(true), "if.onnx", "");
  const Graph& g = r.graph;
  CHECK(count_op(g, "If") == 0);
  CHECK(count_op(g, "Where") == 0);
  CHECK(count_op(g, "Add") == 0);  // the else branch is gone
  CHECK(count_op(g, "Mul") == 2);
  // Branch-local names are prefixed with the If node and branch.
  CHECK(g.find_value("y_node/then/local").has_value());
  CHECK(!g.find_value("y_node/else/local").has_value());
  auto dev = make_cpu_device(1);
  Run run = train_step(g, {{"x", f32({3}, {1, 2, 3})}}, *dev);
  // y = 2 x w; d sum(y) / dw = 2 x
  CHECK(run.outputs[0].real_at(0) == doctest::Approx(2 * (0.5 - 2 + 6)));
  for (int i = 0; i < 3; ++i) CHECK(run.grad_w.real_at(i) == doctest::Approx(2.0 * (i + 1)));
}

TEST_CASE("If with a run-time condition runs both branches and selects, forward and backward") {
  ImportResult r = import_model_bytes(if_model(false), "if.onnx", "");
  const Graph& g = r.graph;
  CHECK(count_op(g, "If") == 0);
  CHECK(count_op(g, "Where") == 1);
  CHECK(g.find_value("y_node/then/local").has_value());
  CHECK(g.find_value("y_node/else/local").has_value());
  auto dev = make_cpu_device(1);
  Tensor x = f32({3}, {1, 2, 3});
  Run t = train_step(g, {{"x", x}, {"cond", boolean(true)}}, *dev);
  CHECK(t.outputs[0].real_at(0) == doctest::Approx(2 * (0.5 - 2 + 6)));
  for (int i = 0; i < 3; ++i) CHECK(t.grad_w.real_at(i) == doctest::Approx(2.0 * (i + 1)));
  Run e = train_step(g, {{"x", x}, {"cond", boolean(false)}}, *dev);
  // y = 2 (x + w); d sum(y) / dw = 2
  CHECK(e.outputs[0].real_at(0) == doctest::Approx(2 * (6 + 1.5)));
  for (int i = 0; i < 3; ++i) CHECK(e.grad_w.real_at(i) == doctest::Approx(2.0));
}

TEST_CASE("If with a run-time condition and branches of different shapes is refused") {
  onnx::ModelProto m;
  m.ParseFromString(if_model(false));
  // The else branch now returns w[0:2]-like data of shape [2]: a constant of another shape.
  auto* n = m.mutable_graph()->mutable_node(0);
  for (auto& a : *n->mutable_attribute()) {
    if (a.name() != "else_branch") continue;
    onnx::GraphProto b;
    b.set_name("else_branch");
    add_float_init(b, "short", {1.0f, 2.0f});
    b.add_output()->set_name("short");
    *a.mutable_g() = b;
  }
  std::string e = test::error_of([&] { import_model_bytes(m.SerializeAsString(), "if.onnx", ""); });
  CHECK(test::contains(e, "[If node 'y_node']"));
  CHECK(test::contains(e, "the then branch gives f32 [3]"));
  CHECK(test::contains(e, "the else branch f32 [2]"));
}

namespace {

// y = GELU(x * w) spelled out as exporters before opset 20 write it, loss = ReduceSum(y):
// variant 0 PyTorch's nn.GELU (Div by sqrt 2, Erf, Add 1, Mul z, Mul 0.5), 1 tf2onnx's (Mul by
// 1/sqrt 2, Add(1, erf), 0.5 z first), 2 PyTorch's with the Erf's output also a graph output
// (then nothing may be fused: that value must be computed).
std::string gelu_model(int variant) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto& g = *m.mutable_graph();
  g.set_name("gelu_test");
  add_tensor_input(g, "x", onnx::TensorProto::FLOAT, {2, 5});
  add_float_init(g, "w", {0.5f, -1.0f, 2.0f, 1.5f, -0.25f});
  auto constant = [&](const std::string& name, float v) {
    auto* a = add_node(g, "Constant", {}, {name})->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(v);
  };
  constant("one", 1.0f);
  constant("half", 0.5f);
  add_node(g, "Mul", {"x", "w"}, {"z"});
  if (variant == 1) {
    constant("inv_sqrt2", 0.70710677f);
    add_node(g, "Mul", {"z", "inv_sqrt2"}, {"d"});
    add_node(g, "Erf", {"d"}, {"e"});
    add_node(g, "Add", {"one", "e"}, {"a"});
    add_node(g, "Mul", {"half", "z"}, {"h"});
    add_node(g, "Mul", {"h", "a"}, {"y"});
  } else {
    constant("sqrt2", 1.4142135f);
    add_node(g, "Div", {"z", "sqrt2"}, {"d"});
    add_node(g, "Erf", {"d"}, {"e"});
    add_node(g, "Add", {"e", "one"}, {"a"});
    add_node(g, "Mul", {"z", "a"}, {"m"});
    add_node(g, "Mul", {"m", "half"}, {"y"});
  }
  auto* r = add_node(g, "ReduceSum", {"y"}, {"loss"})->add_attribute();
  r->set_name("keepdims");
  r->set_type(onnx::AttributeProto::INT);
  r->set_i(0);
  g.add_output()->set_name("loss");
  g.add_output()->set_name("y");
  if (variant == 2) g.add_output()->set_name("e");
  return m.SerializeAsString();
}

}  // namespace

// fuse_gelu (runtime/passes.h), run by the importer: the five nodes become one Gelu whose output,
// loss and d loss / d w equal the unfused graph's (the importer without folding keeps the file's
// nodes) and PyTorch's formula x Phi(x) in f64.
TEST_CASE("GELU spelled as Div, Erf, Add, Mul, Mul imports as one Gelu with the same values") {
  auto dev = make_cpu_device(1);
  const Tensor x = f32({2, 5}, {-3.1f, -1.2f, -0.4f, 0.0f, 0.3f, 0.9f, 1.7f, 2.5f, -2.2f, 4.0f});
  const std::vector<float> w = {0.5f, -1.0f, 2.0f, 1.5f, -0.25f};
  for (int variant : {0, 1, 2}) {
    CAPTURE(variant);
    const std::string bytes = gelu_model(variant);
    ImportResult fused = import_model_bytes(bytes, "gelu.onnx", "");
    ImportOptions raw_opts;
    raw_opts.fold = false;
    ImportResult raw = import_model_bytes(bytes, "gelu.onnx", "", raw_opts);
    CHECK(count_op(raw.graph, "Erf") == 1);
    CHECK(count_op(fused.graph, "Gelu") == (variant == 2 ? 0 : 1));
    CHECK(count_op(fused.graph, "Erf") == (variant == 2 ? 1 : 0));
    for (const Node& n : fused.graph.nodes)  // named after the Erf (no '/' scope here)
      if (n.op_type == "Gelu") CHECK(n.name == "e_node_gelu");
    const Run a = train_step(fused.graph, {{"x", x}}, *dev);
    const Run b = train_step(raw.graph, {{"x", x}}, *dev);
    CHECK(max_err(a.outputs.at(1), b.outputs.at(1)) <= 1e-6);
    CHECK(max_err(a.grad_w, b.grad_w) <= 1e-5);
    for (int64_t i = 0; i < 10; ++i) {
      const double z = double(x.data<float>()[i]) * w[static_cast<size_t>(i % 5)];
      CHECK(a.outputs.at(1).real_at(i) ==
            doctest::Approx(z * 0.5 * (1 + std::erf(z / std::sqrt(2.0)))).epsilon(1e-6));
    }
  }
}

namespace {

// p = Softmax(masked(0.5 * x * w)) over the last axis, loss = ReduceSum(p * p): variant 0 the
// causal form (Where(mask, -inf, .), mask a bool Constant [1,1,4,4]), 1 BERT's (+ a float graph
// input bias [2,1,1,4]), 2 Where(keep, ., -1e4) with keep a bool graph input [2,1,1,4], 3 the
// additive form with a trainable initializer as the bias (no fusion: it needs its gradient).
std::string attention_model(int variant) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto& g = *m.mutable_graph();
  g.set_name("attention_test");
  add_tensor_input(g, "x", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  add_float_init(g, "w", {0.5f, -1.0f, 2.0f, 1.5f});
  auto scalar = [&](const std::string& name, float v) {
    auto* a = add_node(g, "Constant", {}, {name})->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(v);
  };
  scalar("scale", 0.5f);
  add_node(g, "Mul", {"x", "w"}, {"s"});
  add_node(g, "Mul", {"s", "scale"}, {"t"});
  if (variant == 0) {
    auto* a = add_node(g, "Constant", {}, {"future"})->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    auto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::BOOL);
    for (int64_t d : {1, 1, 4, 4}) t->add_dims(d);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) t->add_int32_data(j > i);
    scalar("fill", -std::numeric_limits<float>::infinity());
    add_node(g, "Where", {"future", "fill", "t"}, {"masked"});
  } else if (variant == 2) {
    add_tensor_input(g, "keep", onnx::TensorProto::BOOL, {2, 1, 1, 4});
    scalar("fill", -1e4f);
    add_node(g, "Where", {"keep", "t", "fill"}, {"masked"});
  } else {
    if (variant == 1)
      add_tensor_input(g, "bias", onnx::TensorProto::FLOAT, {2, 1, 1, 4});
    else
      add_float_init(g, "bias", {0.0f, -1.0f, 0.5f, 0.0f});
    add_node(g, "Add", {"t", "bias"}, {"masked"});
  }
  add_node(g, "Softmax", {"masked"}, {"p"})->add_attribute()->set_name("axis");
  g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g.mutable_node(g.node_size() - 1)->mutable_attribute(0)->set_i(-1);
  add_node(g, "Mul", {"p", "p"}, {"pp"});
  auto* r = add_node(g, "ReduceSum", {"pp"}, {"loss"})->add_attribute();
  r->set_name("keepdims");
  r->set_type(onnx::AttributeProto::INT);
  r->set_i(0);
  g.add_output()->set_name("loss");
  g.add_output()->set_name("p");
  return m.SerializeAsString();
}

}  // namespace

// fuse_attention_softmax (runtime/passes.h), run by the importer: scale, mask and Softmax become
// one MaskedSoftmax whose probabilities, loss and d loss / d w equal the unfused graph's; a mask
// a parameter reaches stays unfused.
TEST_CASE("attention's scale, mask and Softmax import as one MaskedSoftmax with the same values") {
  auto dev = make_cpu_device(1);
  std::vector<float> xs(2 * 3 * 4 * 4);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7f * static_cast<float>(i)) * 3;
  const Tensor x = f32({2, 3, 4, 4}, xs);
  const Tensor bias = f32({2, 1, 1, 4}, {0, 0, -1e4f, 0, 0, -2, 0, -1e4f});
  const Tensor keep =
      testing::tensor_of(DType::Bool, {2, 1, 1, 4}, std::vector<uint8_t>{1, 1, 0, 1, 1, 0, 1, 1});
  for (int variant : {0, 1, 2, 3}) {
    CAPTURE(variant);
    const std::string bytes = attention_model(variant);
    ImportResult fused = import_model_bytes(bytes, "attention.onnx", "");
    ImportOptions raw_opts;
    raw_opts.fold = false;
    ImportResult raw = import_model_bytes(bytes, "attention.onnx", "", raw_opts);
    CHECK(count_op(raw.graph, "Softmax") == 1);
    CHECK(count_op(fused.graph, "MaskedSoftmax") == (variant == 3 ? 0 : 1));
    CHECK(count_op(fused.graph, "Where") == 0);
    CHECK(count_op(fused.graph, "Mul") == (variant == 3 ? 3 : 2));  // x * w and p * p remain
    if (variant == 3) continue;
    std::map<std::string, Tensor> feeds = {{"x", x}};
    if (variant == 1) feeds["bias"] = bias;
    if (variant == 2) feeds["keep"] = keep;
    const Run a = train_step(fused.graph, feeds, *dev);
    const Run b = train_step(raw.graph, feeds, *dev);
    CHECK(max_err(a.outputs.at(1), b.outputs.at(1)) <= 1e-6);
    CHECK(max_err(a.outputs.at(0), b.outputs.at(0)) <= 1e-5);
    CHECK(max_err(a.grad_w, b.grad_w) <= 1e-5);
    if (variant == 0)  // the causal mask: row 0 of every [4, 4] block attends to itself alone
      for (int64_t blk = 0; blk < 6; ++blk) CHECK(a.outputs.at(1).real_at(blk * 16) == 1.0);
  }
}
