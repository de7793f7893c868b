// The memory planner: no two buffers live at the same time overlap (every zoo model, several
// batch sizes), reuse actually happens, and ResNet-50 forward at batch 32 needs at most half of
// the no-reuse total; no output goes in place over a broadcast input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/executor.h"
#include "runtime/graph_builder.h"
#include "runtime/memory_plan.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {
constexpr std::string_view kBigModel =
    "a big zoo model, exported by ./setup.sh (models/export_zoo.py --big, needs python3-torch)";
}

TEST_CASE("memory plan: live buffers never overlap, for every zoo model") {
  std::ifstream f(CB_SOURCE_DIR "/models/zoo.json");
  REQUIRE(f.good());
  const auto zoo = nlohmann::json::parse(f);
  int checked = 0, skipped = 0;
  for (const auto& [name, m] : zoo["models"].items()) {
    for (int opset : {13, 17}) {
      std::string path = fmt::format("{}/models/{}_op{}.onnx", CB_SOURCE_DIR, name, opset);
      if (!test::need(path, kBigModel)) {
        ++skipped;
        continue;
      }
      CAPTURE(path);
      ImportResult r = import_model(path);
      for (int64_t batch : {1, 7, 32}) {
        MemoryPlan p = plan_memory(r.graph, batch);
        CHECK_NOTHROW(check_plan(r.graph, p));
        CHECK(p.bytes_peak <= p.bytes_naive);
        CHECK(p.bytes_peak > 0);
      }
      ++checked;
    }
  }
  // The 8 models of zoo.json at two opsets; the committed small ones alone: 8 files.
  CHECK(checked >= (skipped ? 8 : 16));
}

TEST_CASE("memory plan: ResNet-50 forward at batch 32 peaks at most half of no reuse") {
  std::string path = CB_SOURCE_DIR "/models/resnet50_op17.onnx";
  if (!test::need(path, kBigModel)) return;
  ImportResult r = import_model(path);
  MemoryPlan p = plan_memory(r.graph, 32);
  MESSAGE("ResNet-50 batch 32: peak " << p.bytes_peak << " B, no reuse " << p.bytes_naive
                                      << " B, ratio " << p.reuse_ratio());
  CHECK(2 * p.bytes_peak <= p.bytes_naive);
  CHECK(p.inplace > 0);
}

TEST_CASE("memory plan: a detector catches overlapping live buffers") {
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  MemoryPlan p = plan_memory(r.graph, 4);
  // Force two values that are live together onto the same offset: check_plan must notice.
  const Graph& g = r.graph;
  ValueId a = g.inputs[0];
  ValueId b = g.nodes[0].outputs[0];  // conv1's output is live while the input is read
  REQUIRE(p.bytes[static_cast<size_t>(a)] > 0);
  REQUIRE(p.bytes[static_cast<size_t>(b)] > 0);
  p.offset[static_cast<size_t>(b)] = p.offset[static_cast<size_t>(a)];
  CHECK_THROWS(check_plan(g, p));
}

TEST_CASE("memory plan: graph inputs survive the run, so run() can repeat without new inputs") {
  ImportResult r = import_model(CB_SOURCE_DIR "/models/transformer_op17.onnx");
  MemoryPlan p = plan_memory(r.graph, 2);
  for (ValueId i : r.graph.inputs)
    CHECK(p.last[static_cast<size_t>(i)] == static_cast<int>(r.graph.nodes.size()));
}

TEST_CASE("executor: runs in a lent arena that fits its plan, in its own otherwise") {
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  auto d = make_cpu_device(1);
  Device& dev = *d;
  Executor own(r.graph, dev, 4);
  REQUIRE(own.own_arena_bytes() >= static_cast<size_t>(own.plan().bytes_peak));
  Executor lent(r.graph, dev, 4, {}, kSyncStream, own.arena());
  CHECK(lent.own_arena_bytes() == 0);
  CHECK(lent.arena().data == own.arena().data);
  for (ValueId v = 0; v < static_cast<ValueId>(r.graph.values.size()); ++v)
    if (lent.plan().offset[static_cast<size_t>(v)] != MemoryPlan::kNotInArena)
      CHECK(lent.view(v).data ==
            static_cast<std::byte*>(own.arena().data) + lent.plan().offset[static_cast<size_t>(v)]);
  // The two take turns in one arena: each run computes its outputs from its own inputs.
  auto image = [](float seed) {
    Tensor t;
    t.dtype = DType::F32;
    t.dims = {4, 1, 28, 28};
    t.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(float));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(seed * (i + 1));
    return t;
  };
  const Tensor x1 = image(1), x2 = image(2);
  own.set_input(0, x1);
  own.run();
  const Tensor y1 = own.output(0);
  lent.set_input(0, x2);
  lent.run();
  const Tensor y2 = lent.output(0);
  CHECK(y1.bytes != y2.bytes);
  own.set_input(0, x2);
  own.run();
  CHECK(own.output(0).bytes == y2.bytes);
  lent.set_input(0, x1);
  lent.run();
  CHECK(lent.output(0).bytes == y1.bytes);
  // A loan smaller than the plan is not used.
  Executor small(r.graph, dev, 4, {}, kSyncStream, {own.arena().data, 64});
  CHECK(small.own_arena_bytes() > 0);
  CHECK(small.arena().data != own.arena().data);
  // A larger batch does not fit a smaller batch's arena.
  Executor big(r.graph, dev, 64, {}, kSyncStream, own.arena());
  CHECK(big.own_arena_bytes() > 0);
}

TEST_CASE("memory plan: a batch size whose buffers overflow is an error naming the value") {
  // Fuzzing: --batch-size 2305843009213693952 wrapped the sizes and crashed.
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  for (int64_t batch : {int64_t{1} << 61, int64_t{2305843009213693952}, INT64_MAX}) {
    const std::string e = test::error_of([&] { plan_memory(r.graph, batch); });
    CHECK(test::contains(e, "value 'input' [N,1,28,28]"));
    CHECK(test::contains(e, "needs more than 2^60 bytes"));
  }
  CHECK(plan_memory(r.graph, 1 << 20).bytes_peak > 0);  // large but fine
}

// Buffers are rounded up to kArenaAlign bytes, so a small broadcast input ([3] f32, 12 bytes)
// and the output it broadcasts into ([2,3], 24 bytes) take the same 64 bytes: the output must
// not go in place over that input, whose elements are read again for every row.
TEST_CASE("memory plan: no in-place over a broadcast input of the same rounded size") {
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "t");
  ValueId v = b.input("v", DType::F32, shape_of({6}));
  ValueId m = b.input("m", DType::F32, shape_of({2, 3}));
  auto parts = b.emit("Split", {v}, {{"axis", int64_t{0}}}, 2);  // [3], [3]: die at the Muls
  ValueId y = b.op("Add", {b.op("Mul", {parts[0], m}), b.op("Mul", {parts[1], m})});
  g.outputs = {y};
  MemoryPlan p = plan_memory(g, 1);
  for (const Node& n : g.nodes) {
    if (n.op_type != "Mul") continue;
    CAPTURE(n.name);
    CHECK(p.root[static_cast<size_t>(n.outputs[0])] == n.outputs[0]);
  }
  auto dev = make_cpu_device(1);
  Executor ex(g, *dev, 1);
  Tensor tv, tm;
  tv.dtype = tm.dtype = DType::F32;
  tv.dims = {6};
  tm.dims = {2, 3};
  tv.bytes.resize(24);
  tm.bytes.resize(24);
  for (int i = 0; i < 6; ++i) {
    tv.data<float>()[i] = static_cast<float>(i + 1);
    tm.data<float>()[i] = 2.0f;
  }
  ex.set_input(0, tv);
  ex.set_input(1, tm);
  ex.run();
  Tensor out = ex.output(0);
  for (int i = 0; i < 6; ++i)
    CHECK(out.real_at(i) == doctest::Approx(2.0 * (i % 3 + 1) + 2.0 * (i % 3 + 4)));
}

TEST_CASE("memory plan: a view of a view shares its buffer; in place over a view only when dead") {
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "t");
  ValueId x = b.input("x", DType::F32, shape_of({2, 3, 4}));
  ValueId h = b.op("Relu", {x});                      // an arena value
  ValueId r1 = b.op("Reshape", {h, b.ints({6, 4})});  // a view of it
  ValueId r2 = b.op("Reshape", {r1, b.ints({24})});   // a view of the view
  ValueId e = b.op("Exp", {r2});                      // reads h's buffer, which `h` still needs:
  ValueId y = b.op("Add", {b.op("Reshape", {e, b.ints({2, 3, 4})}), h});  // not in place
  g.outputs = {y};
  MemoryPlan p = plan_memory(g, 1);
  CHECK(p.root[static_cast<size_t>(r1)] == h);
  CHECK(p.root[static_cast<size_t>(r2)] == h);  // through r1's root
  CHECK(p.root[static_cast<size_t>(e)] != h);   // h is read after the Exp
  auto dev = make_cpu_device(1);
  Executor ex(g, *dev, 1);
  Tensor tx;
  tx.dtype = DType::F32;
  tx.dims = {2, 3, 4};
  tx.bytes.resize(24 * 4);
  for (int i = 0; i < 24; ++i) tx.data<float>()[i] = static_cast<float>(i % 5) - 2.0f;
  ex.set_input(0, tx);
  ex.run();
  const Tensor out = ex.output(0);
  for (int i = 0; i < 24; ++i) {
    const double hv = std::max(0.0, static_cast<double>(i % 5) - 2.0);
    CHECK(out.real_at(i) == doctest::Approx(std::exp(hv) + hv));
  }
}

TEST_CASE("memory plan: an activation nothing makes or reads takes no bytes") {
  // A rewrite that drops a node leaves its result behind, unproduced and unread (a Transpose a
  // MatMul now reads through): planned, such values would all sit live before the first node.
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "t");
  ValueId x = b.input("x", DType::F32, shape_of({1024}));
  ValueId y = b.op("Relu", {x});
  ValueId dropped = b.op("Neg", {x});
  g.outputs = {y};
  MemoryPlan before = plan_memory(g, 1);
  CHECK(before.bytes[static_cast<size_t>(dropped)] > 0);  // made by Neg: planned, though unread
  // Drop the Neg node as such a rewrite does.
  g.nodes.erase(std::remove_if(g.nodes.begin(), g.nodes.end(),
                               [](const Node& n) { return n.op_type == "Neg"; }),
                g.nodes.end());
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (ValueId o : g.nodes[k].outputs) g.value(o).producer = static_cast<NodeId>(k);
  g.value(dropped).producer = -1;
  MemoryPlan after = plan_memory(g, 1);
  CHECK(after.bytes[static_cast<size_t>(dropped)] == 0);
  CHECK(after.offset[static_cast<size_t>(dropped)] == MemoryPlan::kNotInArena);
  CHECK(after.bytes_peak < before.bytes_peak);
  CHECK_NOTHROW(check_plan(g, after));
  auto dev = make_cpu_device(1);
  Executor ex(g, *dev, 1);  // runs without it
  Tensor t;
  t.dtype = DType::F32;
  t.dims = {1024};
  t.bytes.resize(4096);
  for (int i = 0; i < 1024; ++i) t.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  ex.set_input(0, t);
  ex.run();
  const Tensor out = ex.output(0);
  for (int i = 0; i < 1024; ++i) CHECK(out.real_at(i) == std::max(0.0, i % 7 - 3.0));
}
