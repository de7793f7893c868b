// Op harness cases of the normalization and pooling family (kernels/cpu/batch_normalization.cpp,
// layer_normalization.cpp, norm_grad.cpp, pool*.cpp; kernels/cuda/norm_pool.cu).
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- normalization ------------------------------------------------------------------------------
inline std::vector<Case> layer_norm(OpKind, DType) {
  return {
      {.name = "axis -1, all outputs", .in = {x({4, 7}), x({7}), x({7})}, .outputs = 3},
      {.name = "axis 1, no bias",
       .in = {x({2, 3, 5}), x({3, 5})},
       .attrs = {{"axis", int64_t{1}}},
       .outputs = 3},
      {.name = "scale broadcast",
       .in = {x({2, 3, 5}), x({3, 1}), x({5})},
       .attrs = {{"axis", int64_t{1}}, {"epsilon", 1e-3f}}},
      {.name = "Mean dropped",
       .in = {x({13, 1, 3}), x({3}), x({1, 3})},
       .attrs = {{"axis", int64_t{-2}}},
       .outputs = 3,
       .omit = {1}},
      {.name = "constant rows", .in = {x({3, 4}, list({1})), x({4}), x({4})}, .outputs = 3},
      {.name = "axis 0: one row",
       .in = {x({3, 4}), x({3, 4}), x({1})},
       .attrs = {{"axis", int64_t{0}}},
       .outputs = 3},
      {.name = "zero rows", .in = {x({0, 4}), x({4}), x({4})}, .outputs = 3},
      {.name = "large", .in = {x({64, 512}), x({512}), x({512})}, .outputs = 3, .tol = 10},
  };
}

inline std::vector<Case> layer_norm_grad(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> xd, std::vector<int64_t> sd, int64_t axis,
              std::vector<size_t> omit = {}) {
    return Case{.name = std::move(name),
                .in = {fwd_out(0), x(xd), x(sd)},
                .outputs = 3,
                .omit = std::move(omit),
                .fwd = Fwd{"LayerNormalization", {x(xd), x(sd), x(sd)}, {{"axis", axis}}},
                .tol = 10};
  };
  return {
      c("axis -1", {4, 7}, {7}, -1),
      c("axis 1", {2, 3, 5}, {3, 5}, 1),
      c("scale broadcast", {2, 3, 5}, {3, 1}, 1),
      c("dscale, dB dropped", {13, 1, 3}, {3}, -2, {1, 2}),
      c("dX dropped", {5, 6}, {6}, -1, {0}),
      c("large", {64, 512}, {512}, -1),
  };
}

inline std::vector<Case> batch_norm(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> xd, bool training, double tol = 1) {
    int64_t ch = xd[1];
    Case k{.name = std::move(name),
           .in = {x(xd), x({ch}), x({ch}), x({ch}), x({ch}, uniform(0.5, 2))},
           .attrs = {{"epsilon", 1e-3f}, {"momentum", 0.8f}},
           .tol = tol};
    if (training) {
      k.attrs["training_mode"] = int64_t{1};
      k.outputs = 3;
    }
    return k;
  };
  return {
      c("inference", {3, 4, 5, 5}, false),
      c("inference rank 2", {7, 3}, false),
      c("inference zero batch", {0, 3, 2, 2}, false),
      c("training", {3, 4, 5, 5}, true),
      c("training rank 2", {7, 3}, true),
      c("training 1-D", {2, 5, 13}, true),
      c("training large", {8, 16, 16, 16}, true, 10),
  };
}

inline std::vector<Case> batch_norm_grad(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> xd, std::vector<size_t> omit = {}) {
    int64_t ch = xd[1];
    return Case{.name = std::move(name),
                .in = {fwd_out(0), x(xd), x({ch})},
                .outputs = 3,
                .omit = std::move(omit),
                .fwd = Fwd{"BatchNormalization",
                           {x(xd), x({ch}), x({ch}), x({ch}), x({ch}, positive())},
                           {{"training_mode", int64_t{1}}, {"epsilon", 1e-3f}},
                           3},
                .tol = 10};
  };
  return {
      c("[3,4,5,5]", {3, 4, 5, 5}),
      c("rank 2", {7, 3}),
      c("1-D", {2, 5, 13}),
      c("dscale, dB dropped", {2, 3, 4, 4}, {1, 2}),
      c("dX dropped", {2, 3, 4, 4}, {0}),
      c("large", {8, 16, 16, 16}),
  };
}

struct PoolSpec {
  std::string name;
  std::vector<int64_t> x;
  AttrMap attrs;
};
inline const std::vector<PoolSpec>& pool_specs() {
  using V = std::vector<int64_t>;
  static const std::vector<PoolSpec> s = {
      {"pads, strides, dilations, ceil",
       {2, 3, 7, 6},
       {{"kernel_shape", V{3, 2}},
        {"strides", V{2, 1}},
        {"dilations", V{1, 2}},
        {"pads", V{1, 0, 1, 1}},
        {"ceil_mode", int64_t{1}}}},
      {"2x2 stride 2", {4, 6, 28, 28}, {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}}},
      {"2x2 stride 2, odd sizes", {2, 3, 9, 13}, {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}}},
      {"3x3 stride 2 pad 1",
       {2, 4, 13, 13},
       {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}},
      {"1-D", {2, 3, 11}, {{"kernel_shape", V{3}}, {"strides", V{2}}}},
      {"3-D",
       {1, 2, 5, 6, 7},
       {{"kernel_shape", V{2, 3, 2}}, {"strides", V{1, 2, 2}}, {"pads", V{0, 1, 1, 1, 0, 0}}}},
      {"ceil overhang",
       {1, 1, 1, 5},
       {{"kernel_shape", V{1, 2}}, {"strides", V{1, 2}}, {"ceil_mode", int64_t{1}}}},
      {"zero batch", {0, 3, 4, 4}, {{"kernel_shape", V{2, 2}}}},
      // Windows far larger than the input (a hostile-input probe: they looped over the padding
      // without end): every window is clipped to the input.
      {"window 2^40, SAME",
       {2, 3, 8, 7},
       {{"kernel_shape", V{int64_t{1} << 40, int64_t{1} << 40}},
        {"auto_pad", std::string("SAME_UPPER")}}},
      {"window 2^40 x 2, SAME, 3-D",
       {1, 2, 3, 4, 5},
       {{"kernel_shape", V{int64_t{1} << 40, 2, int64_t{1} << 40}},
        {"auto_pad", std::string("SAME_LOWER")}}},
      {"window 2^40, stride 2^38",
       {1, 2, 3, 8},
       {{"kernel_shape", V{5, int64_t{1} << 40}},
        {"strides", V{1, int64_t{1} << 38}},
        {"pads", V{2, int64_t{1} << 39, 2, (int64_t{1} << 39) + (int64_t{1} << 38)}}}},
      {"stride 2^62, ceil",
       {1, 2, 9, 8},
       {{"kernel_shape", V{3, 2}},
        {"strides", V{int64_t{1} << 62, int64_t{1} << 62}},
        {"pads", V{1, 0, 1, 1}},
        {"ceil_mode", int64_t{1}}}},
  };
  return s;
}

inline std::vector<Case> max_pool(OpKind, DType) {
  std::vector<Case> cs;
  for (const PoolSpec& s : pool_specs()) {
    cs.push_back({.name = s.name, .in = {x(s.x)}, .attrs = s.attrs, .outputs = 2, .tol = 0});
    cs.push_back({.name = s.name + ", no indices", .in = {x(s.x)}, .attrs = s.attrs, .tol = 0});
  }
  AttrMap col = pool_specs()[0].attrs;
  col["storage_order"] = int64_t{1};
  cs.push_back({.name = "column-major indices",
                .in = {x({2, 3, 7, 6})},
                .attrs = col,
                .outputs = 2,
                .tol = 0});
  // ties (ReLU zeros): the first maximum of the window wins, in every path
  for (size_t i : {1, 2, 3})
    cs.push_back({.name = pool_specs()[i].name + ", ties",
                  .in = {x(pool_specs()[i].x, ints(-1, 1))},
                  .attrs = pool_specs()[i].attrs,
                  .outputs = 2,
                  .tol = 0});
  return cs;
}

inline std::vector<Case> average_pool(OpKind, DType) {
  std::vector<Case> cs;
  for (const PoolSpec& s : pool_specs())
    for (int64_t include : {0, 1}) {
      AttrMap a = s.attrs;
      a["count_include_pad"] = include;
      a.erase("dilations");  // AveragePool takes dilations from opset 19 only
      cs.push_back({.name = s.name, .in = {x(s.x)}, .attrs = a});
    }
  return cs;
}

inline std::vector<Case> global_average_pool(OpKind, DType) {
  std::vector<Case> cs;
  for (std::vector<int64_t> d : {std::vector<int64_t>{2, 3, 7, 5},
                                 {2, 3, 11},
                                 {1, 2, 3, 4, 5},
                                 {0, 3, 4, 4},
                                 {4, 16, 32, 32}})
    cs.push_back({.name = "global", .in = {x(d)}, .tol = 10});
  return cs;
}

inline std::vector<Case> max_pool_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (const PoolSpec& s : pool_specs())
    cs.push_back(
        {.name = s.name, .in = {fwd_out(0), x(s.x)}, .fwd = Fwd{"MaxPool", {x(s.x)}, s.attrs}});
  for (size_t i : {1, 2, 3}) {  // ties: the gradient goes to the first maximum only
    const PoolSpec& s = pool_specs()[i];
    cs.push_back({.name = s.name + ", ties",
                  .in = {fwd_out(0), x(s.x, ints(-1, 1))},
                  .fwd = Fwd{"MaxPool", {x(s.x)}, s.attrs}});
  }
  return cs;
}

inline std::vector<Case> average_pool_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (const PoolSpec& s : pool_specs())
    for (int64_t include : {0, 1}) {
      AttrMap a = s.attrs;
      a["count_include_pad"] = include;
      a.erase("dilations");
      cs.push_back({.name = s.name,
                    .in = {fwd_out(0), fwd_shape(0)},
                    .fwd = Fwd{"AveragePool", {x(s.x)}, a}});
    }
  return cs;
}

}  // namespace cb::test::bops
