// Blocked activation layouts on the CPU (assign_blocked_layouts, runtime/passes.h): which values
// the pass keeps in oneDNN's nChw16c layout and where it puts reorders (ResNet-20 and MobileNetV2
// training graphs: no op outside the blocked-capable set ever sees a blocked value), the
// LayoutReorder kernel against the index formula, and training with blocked layouts against
// the plain layout (ResNet-20, 3 SGD steps: the same weights to f32 rounding; only the order of
// BatchNorm's double sums differs).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <set>

#include "importer/onnx_importer.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"
#include "sma/trainer.h"
#include "tests/device_util.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;

namespace {

const std::string kResnet20 = CB_SOURCE_DIR "/models/resnet20_op17.onnx";
const std::string kMobilenet = CB_SOURCE_DIR "/models/mobilenet_v2_op17.onnx";

// The ops whose CPU kernels read or write blocked values (the pass's list).
const std::set<std::string> kBlockedOps = {"Conv",
                                           "ConvGrad",
                                           "BatchNormalization",
                                           "BatchNormalizationGrad",
                                           "Relu",
                                           "ReluGrad",
                                           "Clip",
                                           "ClipGrad",
                                           "Add",
                                           "LayoutReorder"};

// Checks the layouts of a graph after the pass; returns the number of blocked conv operands.
int64_t check_layouts(const Graph& g) {
  int64_t conv_operands = 0;
  std::vector<int> produced(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    const std::string op(n.def->name);
    std::vector<ValueId> vs = n.inputs;
    vs.insert(vs.end(), n.outputs.begin(), n.outputs.end());
    for (ValueId v : n.outputs)
      if (v != kNoValue) ++produced[static_cast<size_t>(v)];
    for (ValueId v : vs) {
      if (v == kNoValue || !g.value(v).blocked) continue;
      CAPTURE(op);
      CHECK(kBlockedOps.count(op) == 1);
      const Shape& s = g.value(v).shape;
      REQUIRE(s.size() == 4);
      CHECK(s[1].value % 16 == 0);
      conv_operands += op == "Conv" || op == "ConvGrad";
    }
    if (op == "LayoutReorder") {  // between the two layouts, the direction its params say
      const bool to_blocked = n.p<ops::LayoutParams>().to_blocked;
      CHECK(g.value(n.inputs[0]).blocked == !to_blocked);
      CHECK(g.value(n.outputs[0]).blocked == to_blocked);
    }
    if (op == "Add" || op == "Relu" || op == "ReluGrad" || op == "BatchNormalization") {
      // read and written with one indexing: one layout
      const bool b = g.value(n.outputs[0]).blocked;
      CHECK(g.value(n.inputs[0]).blocked == b);
      if (op == "Add" || op == "ReluGrad") CHECK(g.value(n.inputs[1]).blocked == b);
    }
  }
  for (ValueId v : g.inputs) CHECK(!g.value(v).blocked);
  for (ValueId v : g.outputs) CHECK(!g.value(v).blocked);
  // Still one producer per activation, and producers before consumers.
  std::vector<char> ready(g.values.size(), 0);
  for (size_t v = 0; v < g.values.size(); ++v) ready[v] = g.values[v].kind != ValueKind::Activation;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    for (ValueId v : g.nodes[k].inputs)
      if (v != kNoValue) CHECK(ready[static_cast<size_t>(v)]);
    for (ValueId v : g.nodes[k].outputs)
      if (v != kNoValue) {
        ready[static_cast<size_t>(v)] = 1;
        CHECK(g.value(v).producer == static_cast<NodeId>(k));
      }
  }
  for (size_t v = 0; v < g.values.size(); ++v) CHECK(produced[v] <= 1);
  return conv_operands;
}

std::vector<Batch> random_batches(std::mt19937_64& rng, int count, int64_t n) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Batch> out(static_cast<size_t>(count));
  for (Batch& b : out) {
    Tensor img, lab;
    img.dims = {n, 3, 32, 32};
    img.bytes.resize(static_cast<size_t>(img.numel()) * sizeof(float));
    for (int64_t i = 0; i < img.numel(); ++i) img.data<float>()[i] = u(rng);
    lab.dtype = DType::I64;
    lab.dims = {n};
    lab.bytes.resize(static_cast<size_t>(n) * sizeof(int64_t));
    for (int64_t i = 0; i < n; ++i) lab.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
    b.inputs = {img};
    b.target = lab;
  }
  return out;
}

}  // namespace

TEST_CASE("layouts: ResNet-20 and MobileNetV2 training graphs keep conv chains blocked") {
  if (!cpu::conv_dnnl_available()) {
    MESSAGE("built without oneDNN: no blocked layouts to check");
    return;
  }
  for (const std::string& path : {kResnet20, kMobilenet}) {
    CAPTURE(path);
    ImportResult r = import_model(path);
    TrainModel plain(r.graph, detect_loss(r.graph), Precision::F32, false);
    TrainModel blocked(r.graph, detect_loss(r.graph), Precision::F32, true);
    const Graph& g = blocked.training_graph().graph;
    CHECK(plain.layouts().blocked == 0);
    const LayoutStats& l = blocked.layouts();
    MESSAGE(path << ": " << l.blocked << " values blocked, " << l.reorders << " reorders");
    CHECK(l.blocked > 20);
    int64_t reorder_nodes = 0;
    for (const Node& n : g.nodes) reorder_nodes += n.def->name == "LayoutReorder";
    CHECK(reorder_nodes == l.reorders);
    CHECK(l.reorders < l.blocked / 4);  // chains, not single values
    CHECK(check_layouts(g) > 20);
    CHECK(check_layouts(blocked.eval_graph()) > 0);
    // The same nodes otherwise.
    CHECK(g.nodes.size() ==
          plain.training_graph().graph.nodes.size() + static_cast<size_t>(l.reorders));
  }
}

TEST_CASE("layouts: LayoutReorder moves channel c of [N,C,H,W] to block c/16, lane c%16") {
  auto dev = make_cpu_device(2);
  const int64_t n = 2, c = 32, h = 3, w = 5, cb = c / 16;
  std::vector<float> x(static_cast<size_t>(n * c * h * w)), y(x.size(), -1), back(x.size(), -1);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::any to = ops::LayoutParams{true}, from = ops::LayoutParams{false};
  KernelArgs a;
  a.params = &to;
  a.in = {{x.data(), DType::F32, {n, c, h, w}}};
  a.out = {{y.data(), DType::F32, {n, c, h, w}, true}};
  test::launch_host(*dev, OpKind::LayoutReorder, a);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p)
        REQUIRE(y[static_cast<size_t>(((i * cb + ch / 16) * h * w + p) * 16 + ch % 16)] ==
                x[static_cast<size_t>((i * c + ch) * h * w + p)]);
  KernelArgs b;
  b.params = &from;
  b.in = {{y.data(), DType::F32, {n, c, h, w}, true}};
  b.out = {{back.data(), DType::F32, {n, c, h, w}}};
  test::launch_host(*dev, OpKind::LayoutReorder, b);
  CHECK(back == x);
}

TEST_CASE("layouts: ResNet-20 trains to the same weights blocked as plain") {
  if (!cpu::conv_dnnl_available()) {
    MESSAGE("built without oneDNN: no blocked layouts to check");
    return;
  }
  ImportResult r = import_model(kResnet20);
  const LossSpec loss = detect_loss(r.graph);
  std::mt19937_64 rng(5);
  const std::vector<Batch> steps = random_batches(rng, 3, 8);
  std::map<std::string, Tensor> result[2];
  double losses[2] = {};
  for (bool blocked : {false, true}) {
    test::CpuSetup s;
    s.opts = TrainerOptions::plain();
    s.opts.batch = 8;
    s.opts.blocked_layouts = blocked;
    s.cores = {0, 1};
    test::CpuTrainer t(r.graph, loss, s);
    CHECK((t.model().layouts().blocked > 0) == blocked);
    for (const Batch& b : steps) losses[blocked] = t.step({b}, 0.05).at(0);
    result[blocked] = t.trained_tensors();
  }
  CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(1e-5));
  REQUIRE(result[0].size() == result[1].size());
  for (const auto& [name, t] : result[0]) {
    CAPTURE(name);
    const Tensor& u = result[1].at(name);
    REQUIRE(u.numel() == t.numel());
    double scale = 0, err = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      scale = std::max(scale, std::abs(double(t.data<float>()[i])));
      err = std::max(err, std::abs(double(t.data<float>()[i]) - u.data<float>()[i]));
    }
    CHECK(err <= 1e-5 * std::max(scale, 1.0));
  }
}
