#include "tests/gradcheck.h"
#include "kernels/cpu/cpu_device.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "autodiff/autodiff.h"
#include "runtime/executor.h"
#include "runtime/graph_builder.h"
#include "runtime/passes.h"

namespace cb::testing {

Tensor random_f64(std::vector<int64_t> dims, uint64_t seed, double lo, double hi, double gap) {
  Tensor t;
  t.dtype = DType::F64;
  t.dims = std::move(dims);
  t.bytes.resize(static_cast<size_t>(t.numel()) * 8);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = u(rng);
    if (gap > 0 && std::abs(x) < gap) x = x < 0 ? x - gap : x + gap;
    t.data<double>()[i] = x;
  }
  return t;
}

namespace {

struct Built {
  Graph g;
  std::vector<ValueId> inputs;
};

Tensor loss_weights(const std::vector<int64_t>& dims) { return random_f64(dims, 99, 0.5, 1.5); }

// The one-node graph plus loss = the sum over the outputs read of ReduceSum(y_k * w_k).
Built build(const GradCase& c, const std::vector<Tensor>& values) {
  Built b;
  b.g.opset = kEmitOpset;
  b.g.ir_version = 8;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Value v;
    v.name = "x" + std::to_string(i);
    v.kind = c.inputs[i].differentiate ? ValueKind::Parameter : ValueKind::Constant;
    v.initializer = true;
    v.dtype = values[i].dtype;
    v.shape = shape_of(values[i].dims);
    v.shape_known = true;
    v.known = known_from_tensor(values[i]);
    v.data = std::make_shared<Tensor>(values[i]);
    b.inputs.push_back(b.g.add_value(std::move(v)));
  }
  GraphBuilder gb(b.g, "case");
  auto outs = gb.emit(c.op, b.inputs, c.attrs, c.outputs);
  ValueId loss = kNoValue;
  for (size_t k : c.read) {
    std::vector<int64_t> dims;
    for (const Dim& d : b.g.value(outs.at(k)).shape) dims.push_back(d.value);
    ValueId w = gb.constant(random_f64(dims, 99 + k, 0.5, 1.5));
    ValueId term = gb.op("ReduceSum", {gb.op("Mul", {outs[k], w})}, {{"keepdims", int64_t{0}}});
    loss = loss == kNoValue ? term : gb.op("Add", {loss, term});
  }
  b.g.outputs = {loss};
  lower_composites(b.g);  // ops defined by a decomposition (LSTM, Einsum...) check through it
  return b;
}

double forward_loss(const GradCase& c, const std::vector<Tensor>& values, Device& dev) {
  Built b = build(c, values);
  Executor ex(b.g, dev, 1);
  ex.run();
  return ex.output(0).real_at(0);
}

}  // namespace

GradValues analytic_gradients(const GradCase& c) {
  auto dev = make_cpu_device(1);
  std::vector<Tensor> values;
  for (const auto& in : c.inputs) values.push_back(in.value);
  Built b = build(c, values);
  GradValues r;
  const Value& y = b.g.value(b.g.nodes.at(b.g.nodes.size() - 2).inputs.at(0));  // Mul(y, w)
  Tensor w = loss_weights(resolve(y.shape, 1));
  for (int64_t e = 0; e < w.numel(); ++e) r.w.push_back(w.real_at(e));
  std::string loss_name = b.g.value(b.g.outputs[0]).name;
  TrainingGraph t = build_training_graph(b.g, {LossKind::ModelOutput, loss_name});
  Executor ex(t.graph, *dev, 1);
  ex.run();
  r.dx.resize(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].differentiate) continue;
    size_t k = 0;
    while (t.params[k] != t.graph.find_value("x" + std::to_string(i)).value()) ++k;
    Tensor g = ex.output(2 + k);
    for (int64_t e = 0; e < g.numel(); ++e) r.dx[i].push_back(g.real_at(e));
  }
  return r;
}

void check_gradients(const GradCase& c) {
  CAPTURE(c.op);
  auto dev = make_cpu_device(1);
  std::vector<Tensor> values;
  for (const auto& in : c.inputs) values.push_back(in.value);
  Built b = build(c, values);
  std::string loss_name = b.g.value(b.g.outputs[0]).name;
  TrainingGraph t = build_training_graph(b.g, {LossKind::ModelOutput, loss_name});
  Executor ex(t.graph, *dev, 1);
  ex.run();
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].differentiate) continue;
    CAPTURE(i);
    size_t k = 0;
    while (t.params[k] != t.graph.find_value("x" + std::to_string(i)).value()) ++k;
    Tensor analytic = ex.output(2 + k);
    REQUIRE(analytic.dims == values[i].dims);
    int64_t n = values[i].numel();
    int64_t stride = std::max<int64_t>(1, n / c.max_elements);
    for (int64_t e = 0; e < n; e += stride) {
      std::vector<Tensor> plus = values, minus = values;
      plus[i].data<double>()[e] += c.step;
      minus[i].data<double>()[e] -= c.step;
      double numeric = (forward_loss(c, plus, *dev) - forward_loss(c, minus, *dev)) / (2 * c.step);
      double got = analytic.real_at(e);
      CAPTURE(e);
      CAPTURE(numeric);
      CAPTURE(got);
      CHECK(std::abs(got - numeric) <= c.atol + c.rtol * std::abs(numeric));
    }
  }
}

}  // namespace cb::testing
