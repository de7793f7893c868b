// Op harness cases of Conv, ConvTranspose, Gemm and MatMul and the Conv gradient
// (kernels/cpu/conv*.cpp, gemm.cpp; on CUDA the cuDNN/cuBLASLt calls of kernels/cuda/library.cu).
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- conv, gemm, matmul, pooling ----------------------------------------------------------------
struct ConvSpec {
  std::string name;
  std::vector<int64_t> x, w;
  bool bias;
  AttrMap attrs;
};
inline const std::vector<ConvSpec>& conv_specs() {
  using V = std::vector<int64_t>;
  static const std::vector<ConvSpec> s = {
      {"3x3 same", {3, 4, 9, 8}, {6, 4, 3, 3}, true, {{"pads", V{1, 1, 1, 1}}}},
      {"groups, asymmetric pads",
       {2, 4, 11, 10},
       {6, 2, 3, 2},
       true,
       {{"strides", V{2, 3}}, {"pads", V{0, 1, 2, 1}}, {"group", int64_t{2}}}},
      {"dilations",
       {2, 3, 12, 12},
       {4, 3, 3, 3},
       false,
       {{"strides", V{1, 2}}, {"dilations", V{2, 3}}, {"pads", V{2, 1, 1, 2}}}},
      {"depthwise x2",
       {3, 6, 10, 9},
       {12, 1, 3, 3},
       true,
       {{"strides", V{2, 1}},
        {"dilations", V{1, 2}},
        {"pads", V{1, 1, 1, 1}},
        {"group", int64_t{6}}}},
      {"pointwise", {2, 8, 7, 7}, {5, 8, 1, 1}, true, {}},
      {"1x1 stride 2", {2, 8, 8, 8}, {4, 8, 1, 1}, false, {{"strides", V{2, 2}}}},
      {"1-D",
       {2, 4, 17},
       {4, 2, 4},
       true,
       {{"strides", V{2}}, {"dilations", V{2}}, {"pads", V{3, 1}}, {"group", int64_t{2}}}},
      {"3-D",
       {2, 2, 5, 6, 7},
       {3, 2, 2, 3, 2},
       true,
       {{"strides", V{1, 2, 1}}, {"dilations", V{2, 1, 1}}, {"pads", V{1, 0, 1, 0, 1, 1}}}},
      {"one input channel (LeNet c1)",
       {4, 1, 28, 28},
       {6, 1, 5, 5},
       true,
       {{"pads", V{2, 2, 2, 2}}}},
      {"ResNet 3x3", {2, 16, 16, 16}, {16, 16, 3, 3}, false, {{"pads", V{1, 1, 1, 1}}}},
      {"ResNet 3x3 stride 2",
       {2, 16, 16, 16},
       {32, 16, 3, 3},
       false,
       {{"pads", V{1, 1, 1, 1}}, {"strides", V{2, 2}}}},
      {"prime sizes", {1, 3, 7, 13}, {5, 3, 2, 2}, true, {}},
      {"SAME_UPPER",
       {1, 2, 7, 7},
       {3, 2, 3, 3},
       true,
       {{"auto_pad", std::string("SAME_UPPER")}, {"strides", V{2, 2}}}},
      {"zero batch", {0, 3, 5, 5}, {2, 3, 3, 3}, true, {}},
  };
  return s;
}

// Shapes choose_conv_algorithms gives Winograd's algorithm (f32 only; where the cores have no
// Winograd kernel the node convolves directly).
inline const std::vector<ConvSpec>& winograd_specs() {
  using V = std::vector<int64_t>;
  static const std::vector<ConvSpec> s = {
      {"Winograd 3x3 16x16", {2, 32, 16, 16}, {48, 32, 3, 3}, false, {{"pads", V{1, 1, 1, 1}}}},
      {"Winograd 3x3 28x30, no pads", {3, 32, 30, 32}, {32, 32, 3, 3}, false, {}},
  };
  return s;
}

// Mixed precision (f32 only): operands rounded to bf16 (8 significant bits, a relative error up to
// 2^-9 each), f32 accumulation; against the f64 reference of the unrounded inputs that is about
// 1e-2 of the largest output for these sums of up to 72 products. Where the device has no bf16
// kernel the node computes in f32, well inside it (tests/test_kernels_conv.cpp checks that the
// bf16 path really runs where the cores have it, against rounded operands).
constexpr double kBf16Tol = 1000;

inline std::vector<Case> conv(OpKind, DType t) {
  std::vector<Case> cs;
  for (const ConvSpec& s : conv_specs()) {
    Case c{.name = s.name, .in = {x(s.x), x(s.w)}, .attrs = s.attrs, .tol = 10};
    if (s.bias) c.in.push_back(x({s.w[0]}));
    cs.push_back(c);
    if (t != DType::F32) continue;
    c.name += " (bf16 compute)";
    c.bf16 = true;
    c.tol = kBf16Tol;
    cs.push_back(c);
  }
  for (const ConvSpec& s : winograd_specs()) {
    if (t != DType::F32) continue;
    cs.push_back(
        {.name = s.name, .in = {x(s.x), x(s.w)}, .attrs = s.attrs, .tol = 10, .winograd = true});
  }
  return cs;
}

inline std::vector<Case> conv_grad(OpKind, DType t) {
  std::vector<Case> cs;
  for (const ConvSpec& s : conv_specs()) {
    Fwd f{"Conv", {x(s.x), x(s.w)}, s.attrs};
    if (s.bias) f.in.push_back(x({s.w[0]}));
    // dX, dW and dB; without dX (a first layer: the single-channel dW loops); without dW
    for (std::vector<size_t> omit : {std::vector<size_t>{}, {0}, {1}})
      for (bool bf16 : {false, true}) {
        if (bf16 && t != DType::F32) continue;
        cs.push_back({.name = s.name + (bf16 ? " (bf16 compute)" : ""),
                      .in = {fwd_out(0), x(s.x), x(s.w)},
                      .outputs = 3,
                      .omit = omit,
                      .fwd = f,
                      .tol = bf16 ? kBf16Tol : 10,
                      .bf16 = bf16});
      }
  }
  for (const ConvSpec& s : winograd_specs()) {
    if (t != DType::F32) continue;
    for (std::vector<size_t> omit : {std::vector<size_t>{}, {0}, {1}})
      cs.push_back({.name = s.name,
                    .in = {fwd_out(0), x(s.x), x(s.w)},
                    .outputs = 3,
                    .omit = omit,
                    .fwd = Fwd{"Conv", {x(s.x), x(s.w)}, s.attrs},
                    .tol = 10,
                    .winograd = true});
  }
  return cs;
}

// ConvTranspose(X [N,C,D...], W [C,M/G,k...], B [M]?): the Conv specs' geometry run backwards,
// plus output_padding, output_shape (whose pads may be negative) and auto_pad.
struct ConvTransposeSpec {
  std::string name;
  std::vector<int64_t> x, w;
  bool bias;
  AttrMap attrs;
};
inline const std::vector<ConvTransposeSpec>& conv_transpose_specs() {
  using V = std::vector<int64_t>;
  static const std::vector<ConvTransposeSpec> s = {
      {"3x3 stride 2, pads, output_padding",
       {2, 4, 5, 6},
       {4, 3, 3, 3},
       true,
       {{"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}, {"output_padding", V{1, 1}}}},
      {"groups, dilations, asymmetric pads",
       {2, 4, 5, 5},
       {4, 2, 3, 2},
       true,
       {{"strides", V{2, 1}},
        {"dilations", V{1, 2}},
        {"pads", V{0, 1, 1, 0}},
        {"group", int64_t{2}}}},
      {"depthwise", {2, 3, 6, 6}, {3, 1, 3, 3}, false, {{"group", int64_t{3}}}},
      {"output_shape past every window",
       {1, 2, 3, 3},
       {2, 2, 3, 3},
       true,
       {{"strides", V{3, 2}}, {"output_shape", V{10, 8}}}},
      {"SAME_LOWER",
       {1, 2, 4, 5},
       {2, 3, 3, 3},
       true,
       {{"auto_pad", std::string("SAME_LOWER")}, {"strides", V{2, 2}}}},
      {"1-D",
       {2, 3, 7},
       {3, 2, 4},
       true,
       {{"strides", V{2}}, {"dilations", V{2}}, {"pads", V{1, 2}}}},
      {"3-D",
       {1, 2, 3, 4, 3},
       {2, 2, 2, 3, 2},
       true,
       {{"strides", V{2, 1, 2}}, {"pads", V{0, 1, 0, 1, 0, 0}}}},
      {"pointwise", {2, 8, 5, 5}, {8, 4, 1, 1}, true, {}},
      {"large",
       {4, 16, 16, 16},
       {16, 8, 4, 4},
       true,
       {{"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}},
      {"zero batch", {0, 3, 4, 4}, {3, 2, 3, 3}, true, {}},
  };
  return s;
}

inline std::vector<Case> conv_transpose(OpKind, DType) {
  std::vector<Case> cs;
  for (const ConvTransposeSpec& s : conv_transpose_specs()) {
    Case c{.name = s.name, .in = {x(s.x), x(s.w)}, .attrs = s.attrs, .tol = 10};
    if (s.bias) {
      int64_t g = s.attrs.count("group") ? std::get<int64_t>(s.attrs.at("group")) : 1;
      c.in.push_back(x({s.w[1] * g}));
    }
    cs.push_back(c);
  }
  return cs;
}

inline std::vector<Case> gemm(OpKind, DType t) {
  std::vector<Case> cs;
  const int64_t m = 37, n = 29, k = 23;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (std::vector<int64_t> cd :
           std::vector<std::vector<int64_t>>{{}, {n}, {m, 1}, {1}, {m, n}, {-1}}) {
        Case c{.name = "transposes, C",
               .in = {x(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}),
                      x(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n})},
               .attrs = {{"alpha", 0.5f},
                         {"beta", 2.0f},
                         {"transA", int64_t{ta}},
                         {"transB", int64_t{tb}}},
               .tol = 10};
        if (cd != std::vector<int64_t>{-1}) c.in.push_back(x(cd));
        cs.push_back(c);
      }
  cs.push_back({.name = "large",
                .in = {x({256, 80}), x({96, 80}), x({96})},
                .attrs = {{"transB", int64_t{1}}},
                .tol = 10});
  if (t == DType::F32)  // each thread's half large enough for the bf16 path (gemm_bf16.cpp)
    cs.push_back({.name = "large (bf16 compute)",
                  .in = {x({256, 80}), x({96, 80}), x({96})},
                  .attrs = {{"transB", int64_t{1}}},
                  .tol = kBf16Tol,
                  .bf16 = true});
  cs.push_back({.name = "K = 0", .in = {x({5, 0}), x({0, 4}), x({4})}, .attrs = {{"beta", 0.5f}}});
  cs.push_back({.name = "K = 0, no C", .in = {x({5, 0}), x({0, 4})}});
  cs.push_back({.name = "M = 0", .in = {x({0, 3}), x({3, 4}), x({4})}});
  cs.push_back({.name = "vector", .in = {x({1, 13}), x({13, 1})}});
  return cs;
}

inline std::vector<Case> matmul(OpKind, DType t) {
  std::vector<Case> cs;
  using V = std::vector<int64_t>;
  const std::pair<V, V> shapes[] = {
      {{2, 1, 3, 4}, {5, 4, 2}},  // both batch dims broadcast
      {{4}, {2, 4, 3}},           // 1-D left
      {{2, 3, 4}, {4}},           // 1-D right
      {{4}, {4}},                 // dot
      {{0}, {0}},                 // empty dot: 0
      {{6, 3, 4}, {4, 5}},        // shared right matrix
      {{3, 4}, {6, 4, 5}},        // shared left matrix
      {{64, 48}, {48, 40}},       // one product split over threads
      {{3, 0}, {0, 4}},           // K = 0: zeros
      {{0, 3}, {2, 3, 5}},        // M = 0
      {{7, 13}, {13, 1}},
  };
  for (const auto& [a, b] : shapes) cs.push_back({.name = "matmul", .in = {x(a), x(b)}, .tol = 10});
  if (t == DType::F32)  // attention's batched products, large enough for the bf16 path
    cs.push_back({.name = "batched (bf16 compute)",
                  .in = {x({2, 64, 72}), x({2, 72, 64})},
                  .tol = kBf16Tol,
                  .bf16 = true});
  return cs;
}

}  // namespace cb::test::bops
