// The reverse-mode pass itself: a value read twice gets the sum of both gradients, nodes a
// gradient cannot pass are all named in one error, values no parameter depends on get none, and
// the default loss is detected from the model's outputs.
#include <doctest/doctest.h>

#include "autodiff/autodiff.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/error.h"
#include "runtime/executor.h"
#include "runtime/graph_builder.h"
#include "tests/gradcheck.h"

using namespace cb;

namespace {
ValueId param(Graph& g, const std::string& name, Tensor t) {
  Value v;
  v.name = name;
  v.kind = ValueKind::Parameter;
  v.initializer = true;
  v.dtype = t.dtype;
  v.shape = shape_of(t.dims);
  v.shape_known = true;
  v.data = std::make_shared<Tensor>(std::move(t));
  return g.add_value(std::move(v));
}
}  // namespace

TEST_CASE("autodiff: a value read twice gets the sum of its gradients") {
  Graph g;
  g.opset = kEmitOpset;
  ValueId w = param(g, "w", testing::random_f64({3}, 1));
  GraphBuilder b(g, "m");
  // loss = sum(w * w + w) -> dloss/dw = 2w + 1
  ValueId loss =
      b.op("ReduceSum", {b.op("Add", {b.op("Mul", {w, w}), w})}, {{"keepdims", int64_t{0}}});
  g.outputs = {loss};
  TrainingGraph t = build_training_graph(g, {LossKind::ModelOutput, g.value(loss).name});
  REQUIRE(t.params.size() == 1);
  auto dev = make_cpu_device(1);
  Executor ex(t.graph, *dev, 1);
  ex.run();
  Tensor grad = ex.output(2);
  const Tensor& wv = *g.value(w).data;
  for (int i = 0; i < 3; ++i) CHECK(grad.real_at(i) == doctest::Approx(2 * wv.real_at(i) + 1));
}

TEST_CASE("autodiff: every node without a gradient is named at once") {
  Graph g;
  g.opset = kEmitOpset;
  ValueId w = param(g, "w", testing::random_f64({2, 3}, 2));
  GraphBuilder b(g, "m");
  ValueId a = b.op("Abs", {w});    // Abs has no vjp
  ValueId f = b.op("Floor", {w});  // nor Floor
  ValueId loss = b.op("ReduceSum", {b.op("Add", {a, f})}, {{"keepdims", int64_t{0}}});
  g.outputs = {loss};
  try {
    build_training_graph(g, {LossKind::ModelOutput, g.value(loss).name});
    FAIL("expected a cb::Error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("2 nodes") != std::string::npos);
    CHECK(m.find("[Abs node 'm/Abs_0']") != std::string::npos);
    CHECK(m.find("[Floor node 'm/Floor_1']") != std::string::npos);
  }
}

TEST_CASE("autodiff: the default loss comes from the outputs") {
  Graph g;
  g.opset = kEmitOpset;
  ValueId w = param(g, "w", testing::random_f64({4, 3}, 3));
  Value x;
  x.name = "x";
  x.kind = ValueKind::Input;
  x.dtype = DType::F64;
  x.shape = {Dim::N(), Dim::of(4)};
  x.shape_known = true;
  ValueId xi = g.add_value(x);
  g.inputs = {xi};
  GraphBuilder b(g, "m");
  ValueId logits = b.op("MatMul", {xi, w});
  g.outputs = {logits};
  LossSpec s = detect_loss(g);
  CHECK(s.kind == LossKind::SoftmaxCrossEntropy);
  CHECK(s.output == g.value(logits).name);
  TrainingGraph t = build_training_graph(g, s);
  CHECK(t.target != kNoValue);
  CHECK(t.graph.value(t.target).shape == Shape{Dim::N()});
  CHECK(t.graph.value(t.loss).shape.empty());
  // Nothing flows to the input: no gradient node reads into a gradient for x.
  for (ValueId gr : t.grads) CHECK(t.graph.value(gr).shape == Shape{Dim::of(4), Dim::of(3)});
}
