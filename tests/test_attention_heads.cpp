// AttentionHeads, the node fuse_attention_heads makes of attention's per-head chains: under
// --precision bf16 (products in bf16, heads stored as bf16, dS a bf16 temporary) the chain run a
// head at a time gives the bits of the unfused kernels run over whole tensors. The f32 chains are
// checked against attention itself by the op harness (tests/backend_ops/attention.h) and, in a
// GPT's graphs, against the portable graph (test_golden_transformers.cpp).
#include <doctest/doctest.h>

#include <any>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "importer/onnx_importer.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"
#include "sma/model.h"
#include "tests/device_util.h"
#include "tests/test_util.h"

using namespace cb;

namespace {
using H = ops::AttentionHeadsParams;
using F = H::Ref::From;

// A host tensor: f32, or f32 values stored as bf16.
struct Buf {
  std::vector<int64_t> dims;
  bool bf16 = false;
  std::vector<unsigned char> bytes;
  Buf(std::vector<int64_t> d, bool half, uint32_t seed = 0, double lo = -1, double hi = 1)
      : dims(std::move(d)), bf16(half) {
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    bytes.assign(static_cast<size_t>(n) * (bf16 ? 2 : 4), 0);
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(lo, hi);
    for (int64_t i = 0; seed && i < n; ++i) {
      const float v = static_cast<float>(u(g));
      if (bf16) {
        const uint16_t h = math::f32_to_bf16(v);
        std::memcpy(bytes.data() + i * 2, &h, 2);
      } else {
        std::memcpy(bytes.data() + i * 4, &v, 4);
      }
    }
  }
  TensorView view() {
    TensorView v{bytes.data(), DType::F32, dims};
    v.bf16_storage = bf16;
    return v;
  }
};

ops::MatMulParams mm(bool bf16, bool ta, bool tb, DimList ap, DimList bp, DimList yp) {
  ops::MatMulParams p;
  p.bf16 = bf16;
  p.trans_a = ta, p.trans_b = tb;
  p.a_perm = std::move(ap), p.b_perm = std::move(bp), p.y_perm = std::move(yp);
  return p;
}

void run(Device& dev, OpKind op, std::vector<TensorView> in, std::vector<TensorView> out,
         const std::any& params) {
  KernelArgs a;
  a.params = &params;
  a.in = std::move(in);
  a.out = std::move(out);
  test::launch_host(dev, op, a);
}

H::Step step(H::Kind k, std::vector<H::Ref> in, H::Ref out, ops::MatMulParams p = {},
             ops::MaskedSoftmaxParams s = {}) {
  return H::Step{.kind = k, .name = "", .matmul = p, .softmax = s, .in = in, .out = out};
}
}  // namespace

// Both precisions; T 128 and d 64 (each product large enough for the bf16 kernel, and under
// the causal mask its blocks of 64 query or key rows too, so the kernel skips the masked blocks:
// S and dP computed only where the softmaxes read them, P V and dS K over each block's kept keys,
// P^T dO and dS^T Q over the queries that see each key block).
TEST_CASE("attention heads: a chain, a head at a time, gives the unfused kernels' bits") {
  if (!cpu::dnnl_bf16_available())
    MESSAGE("no bf16 kernels on these cores: the products run in f32 (still compared bit for bit)");
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    auto dev = make_cpu_device(2);
    const int64_t n = 2, t = 128, h = 3, d = 64;
    const std::vector<int64_t> x4{n, t, h, d}, s4{n, h, t, t};
    const DimList heads{0, 2, 1, 3}, heads_t{0, 2, 3, 1}, none{};
    const ops::MaskedSoftmaxParams sp{0.125f, ops::MaskedSoftmaxParams::Mask::FillWhereTrue,
                                      -std::numeric_limits<float>::infinity()};
    std::vector<unsigned char> causal(static_cast<size_t>(t * t));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) causal[static_cast<size_t>(i * t + j)] = j > i;
    TensorView mask{causal.data(), DType::Bool, {t, t}};
    // Under bf16 the heads are stored as bf16, as assign_bf16_operands stores them.
    Buf q(x4, bf16, 1), k(x4, bf16, 2), v(x4, bf16, 3), dout(x4, false, 4);
    const auto s_mm = mm(bf16, false, false, heads, heads_t, none),
               o_mm = mm(bf16, false, false, none, heads, heads),
               dp_mm = mm(bf16, false, true, heads, heads, none),
               dv_mm = mm(bf16, true, false, none, heads, heads),
               dq_mm = mm(bf16, false, true, none, heads_t, heads),
               dk_mm = mm(bf16, true, false, heads, none, {0, 3, 1, 2});

    // Unfused, whole tensors: S, P, O; dP, dS (under bf16 stored as bf16: only bf16 products read
    // it), dV, dQ, dK.
    Buf s(s4, false), p(s4, false), o(x4, false), dp(s4, false), ds(s4, bf16), dv(x4, false),
        dq(x4, false), dk(x4, false);
    run(*dev, OpKind::MatMul, {q.view(), k.view()}, {s.view()}, s_mm);
    run(*dev, OpKind::MaskedSoftmax, {s.view(), mask}, {p.view()}, sp);
    run(*dev, OpKind::MatMul, {p.view(), v.view()}, {o.view()}, o_mm);
    run(*dev, OpKind::MatMul, {dout.view(), v.view()}, {dp.view()}, dp_mm);
    run(*dev, OpKind::MatMul, {p.view(), dout.view()}, {dv.view()}, dv_mm);
    run(*dev, OpKind::MaskedSoftmaxGrad, {dp.view(), p.view(), mask}, {ds.view()}, sp);
    run(*dev, OpKind::MatMul, {ds.view(), k.view()}, {dq.view()}, dq_mm);
    run(*dev, OpKind::MatMul, {q.view(), ds.view()}, {dk.view()}, dk_mm);

    // The two chains fuse_attention_heads makes of them.
    H fwd;
    fwd.temp_bf16 = {0};
    fwd.steps = {
        step(H::Kind::MatMul, {{F::Input, 0}, {F::Input, 1}}, {F::Temp, 0}, s_mm),
        step(H::Kind::MaskedSoftmax, {{F::Temp, 0}, {F::Input, 2}}, {F::Output, 0}, {}, sp),
        step(H::Kind::MatMul, {{F::Output, 0}, {F::Input, 3}}, {F::Output, 1}, o_mm)};
    Buf p2(s4, false), o2(x4, false);
    run(*dev, OpKind::AttentionHeads, {q.view(), k.view(), mask, v.view()}, {p2.view(), o2.view()},
        std::any(fwd));
    CHECK(p2.bytes == p.bytes);
    CHECK(o2.bytes == o.bytes);

    H bwd;
    bwd.temp_bf16 = {0, static_cast<char>(bf16)};
    bwd.steps = {step(H::Kind::MatMul, {{F::Input, 0}, {F::Input, 1}}, {F::Temp, 0}, dp_mm),
                 step(H::Kind::MatMul, {{F::Input, 2}, {F::Input, 0}}, {F::Output, 0}, dv_mm),
                 step(H::Kind::MaskedSoftmaxGrad, {{F::Temp, 0}, {F::Input, 2}, {F::Input, 3}},
                      {F::Temp, 1}, {}, sp),
                 step(H::Kind::MatMul, {{F::Temp, 1}, {F::Input, 4}}, {F::Output, 1}, dq_mm),
                 step(H::Kind::MatMul, {{F::Input, 5}, {F::Temp, 1}}, {F::Output, 2}, dk_mm)};
    Buf dv2(x4, false), dq2(x4, false), dk2(x4, false);
    run(*dev, OpKind::AttentionHeads, {dout.view(), v.view(), p.view(), mask, k.view(), q.view()},
        {dv2.view(), dq2.view(), dk2.view()}, std::any(bwd));
    CHECK(dv2.bytes == dv.bytes);
    CHECK(dq2.bytes == dq.bytes);
    CHECK(dk2.bytes == dk.bytes);
    // Not vacuous: the gradients are not all zero.
    int64_t nonzero = 0;
    for (unsigned char b : dk2.bytes) nonzero += b != 0;
    CHECK(nonzero > static_cast<int64_t>(dk2.bytes.size() / 2));
  }
}

// The pass on a GPT's CPU training graph (TrainModel with blocked layouts): each block's forward
// and backward chain is one node, and the graph is still in order: every node reads only values
// the graph is given or an earlier node wrote (the nodes it moved after a chain included), and no
// node reads a temporary the chains now hold inside.
TEST_CASE("attention heads: the fused GPT graph stays in topological order") {
  const std::string model = CB_SOURCE_DIR "/models/gpt_small.onnx";
  if (!test::need(model, "models/gpt_small.onnx, made by ./setup.sh (models/transformers.py)"))
    return;
  const ImportResult r = import_model(model);
  const TrainModel m(r.graph, {LossKind::SoftmaxCrossEntropy, ""}, Precision::F32, true);
  for (const Graph* g : {&m.training_graph().graph, &m.eval_graph()}) {
    std::vector<char> ready(g->values.size(), 0);
    for (size_t v = 0; v < g->values.size(); ++v)
      ready[v] = g->values[v].kind != ValueKind::Activation;  // inputs, parameters, constants
    int64_t heads = 0, bad = 0;
    for (size_t k = 0; k < g->nodes.size(); ++k) {
      const Node& n = g->nodes[k];
      heads += n.def && n.def->name == std::string_view("AttentionHeads");
      for (ValueId v : n.inputs)
        if (v != kNoValue && !ready[static_cast<size_t>(v)]) {
          ++bad;
          MESSAGE(n.name << " reads " << g->value(v).name << " before any node writes it");
        }
      for (ValueId v : n.outputs)
        if (v != kNoValue) {
          ready[static_cast<size_t>(v)] = 1;
          CHECK(g->value(v).producer == static_cast<NodeId>(k));
        }
    }
    CHECK(bad == 0);
    CHECK(heads == (g == &m.eval_graph() ? 2 : 4));
  }
}
