// Op harness cases of the data movement family (kernels/cpu/data_movement*.cpp, resize.cpp;
// kernels/cuda/data_movement.cu): ops that move elements, every dtype, values compared exactly
// (Resize interpolates), plus constants, Range and the gradients that scatter back.
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- data movement (every dtype; values compared exactly) ---------------------------------------
inline std::vector<Case> concat(OpKind, DType) {
  return {
      {.name = "axis 1 with a zero-size input",
       .in = {x({2, 3, 4}), x({2, 1, 4}), x({2, 0, 4})},
       .attrs = {{"axis", int64_t{1}}},
       .tol = 0},
      {.name = "axis -1", .in = {x({3, 5}), x({3, 7})}, .attrs = {{"axis", int64_t{-1}}}, .tol = 0},
      {.name = "one input", .in = {x({4})}, .attrs = {{"axis", int64_t{0}}}, .tol = 0},
      {.name = "axis 0", .in = {x({1, 13}), x({6, 13})}, .attrs = {{"axis", int64_t{0}}}, .tol = 0},
      {.name = "large",
       .in = {x({64, 70}), x({64, 61})},
       .attrs = {{"axis", int64_t{1}}},
       .tol = 0},
      {.name = "all zero-size",
       .in = {x({0, 3}), x({0, 2})},
       .attrs = {{"axis", int64_t{1}}},
       .tol = 0},
  };
}

inline std::vector<Case> expand(OpKind, DType) {
  return {
      {.name = "[3,1] to [2,3,4]", .in = {x({3, 1}), i64({2, 3, 4})}, .tol = 0},
      {.name = "scalar", .in = {x({}), i64({5})}, .tol = 0},
      {.name = "two-sided", .in = {x({1, 7}), i64({13, 1, 1})}, .tol = 0},
      {.name = "zero-size", .in = {x({4}), i64({0, 4})}, .tol = 0},
      {.name = "large", .in = {x({16, 1, 20}), i64({8, 16, 32, 20})}, .tol = 0},
  };
}

inline std::vector<Case> flatten(OpKind, DType) {
  std::vector<Case> cs;
  for (int64_t axis : {0, 1, 3, -1})
    cs.push_back({.name = "axis", .in = {x({2, 3, 1, 4})}, .attrs = {{"axis", axis}}, .tol = 0});
  cs.push_back({.name = "zero-size", .in = {x({0, 5})}, .tol = 0});
  return cs;
}

inline std::vector<Case> gather(OpKind, DType) {
  return {
      {.name = "axis 0, negative indices",
       .in = {x({5, 4}), fixed(DType::I64, {3}, ints(-5, 4))},
       .tol = 0},
      {.name = "axis 1, 2-D indices",
       .in = {x({2, 7, 3}), fixed(DType::I64, {2, 2}, ints(-7, 6))},
       .attrs = {{"axis", int64_t{1}}},
       .tol = 0},
      {.name = "scalar index", .in = {x({7}), fixed(DType::I64, {}, list({-2}))}, .tol = 0},
      {.name = "i32 indices, axis -1",
       .in = {x({3, 13}), fixed(DType::I32, {6}, ints(-13, 12))},
       .attrs = {{"axis", int64_t{-1}}},
       .tol = 0},
      {.name = "no indices", .in = {x({5, 3}), fixed(DType::I64, {0}, {})}, .tol = 0},
      {.name = "embedding",
       .in = {x({50, 700}), fixed(DType::I64, {16, 20}, ints(0, 49))},
       .tol = 0},
  };
}

inline std::vector<Case> identity(OpKind, DType) {
  return {{.name = "[13,7]", .in = {x({13, 7})}, .tol = 0},
          {.name = "scalar", .in = {x({})}, .tol = 0},
          {.name = "zero-size", .in = {x({0})}, .tol = 0}};
}

inline std::vector<Case> pad(OpKind, DType) {
  auto mode = [](const char* m) { return AttrMap{{"mode", std::string(m)}}; };
  return {
      {.name = "constant value",
       .in = {x({3, 5}), i64({1, 2, 0, 3}), scalar(1)},
       .attrs = mode("constant"),
       .tol = 0},
      {.name = "constant zero", .in = {x({2, 3, 4}), i64({0, 1, 1, 1, 0, 2})}, .tol = 0},
      {.name = "reflect",
       .in = {x({2, 3, 4}), i64({0, 1, 2, 0, 2, 3})},
       .attrs = mode("reflect"),
       .tol = 0},
      {.name = "edge", .in = {x({3, 5}), i64({2, 1, 1, 4})}, .attrs = mode("edge"), .tol = 0},
      {.name = "negative pads crop", .in = {x({4, 6}), i64({-1, 0, 1, -2})}, .tol = 0},
      {.name = "axes input",
       .in = {x({2, 3, 4}), i64({2, 3}), absent(), i64({-2})},
       .attrs = mode("constant"),
       .tol = 0},
      {.name = "zero-size input", .in = {x({0, 3}), i64({1, 0, 1, 0}), scalar(1)}, .tol = 0},
      {.name = "large", .in = {x({64, 60}), i64({1, 3, 2, 5})}, .attrs = mode("reflect"), .tol = 0},
  };
}

inline std::vector<Case> reshape(OpKind, DType) {
  return {
      {.name = "-1", .in = {x({2, 3, 4}), i64({4, -1})}, .tol = 0},
      {.name = "more dims", .in = {x({6}), i64({1, 2, 3, 1})}, .tol = 0},
      {.name = "0 copies", .in = {x({2, 3, 4}), i64({0, 12})}, .tol = 0},
      {.name = "zero-size", .in = {x({0, 3}), i64({0, 1, 3})}, .tol = 0},
      {.name = "to scalar", .in = {x({1, 1}), fixed(DType::I64, {0}, {})}, .tol = 0},
  };
}

inline std::vector<Case> shape(OpKind, DType) {
  return {
      {.name = "all dims", .in = {x({2, 3, 4})}, .tol = 0},
      {.name = "start 1", .in = {x({2, 3, 4})}, .attrs = {{"start", int64_t{1}}}, .tol = 0},
      {.name = "end -1", .in = {x({2, 0, 4})}, .attrs = {{"end", int64_t{-1}}}, .tol = 0},
      {.name = "scalar: empty", .in = {x({})}, .tol = 0},
  };
}

inline std::vector<Case> slice(OpKind, DType) {
  return {
      {.name = "two axes", .in = {x({5, 7}), i64({1, 0}), i64({4, 7})}, .tol = 0},
      {.name = "negative step",
       .in = {x({7}), i64({-1}), i64({-8}), i64({0}), i64({-2})},
       .tol = 0},
      {.name = "axis 1 step 3",
       .in = {x({3, 13, 2}), i64({1}), i64({100}), i64({1}), i64({3})},
       .tol = 0},
      {.name = "empty", .in = {x({5, 2}), i64({3}), i64({3})}, .tol = 0},
      {.name = "of a zero-size input", .in = {x({0, 6}), i64({1}), i64({5}), i64({1})}, .tol = 0},
      {.name = "large",
       .in = {x({64, 300}), i64({5, 1}), i64({60, 299}), i64({0, 1}), i64({1, 2})},
       .tol = 0},
  };
}

inline std::vector<Case> split(OpKind, DType) {
  return {
      {.name = "even, 3 outputs", .in = {x({6, 4})}, .outputs = 3, .tol = 0},
      {.name = "sizes input",
       .in = {x({3, 4}), i64({1, 3})},
       .attrs = {{"axis", int64_t{1}}},
       .outputs = 2,
       .tol = 0},
      {.name = "a zero-size part",
       .in = {x({2, 4, 3}), i64({0, 4})},
       .attrs = {{"axis", int64_t{-2}}},
       .outputs = 2,
       .tol = 0},
      {.name = "an output dropped", .in = {x({9, 5})}, .outputs = 3, .omit = {1}, .tol = 0},
      {.name = "large",
       .in = {x({64, 300}), i64({100, 200})},
       .attrs = {{"axis", int64_t{1}}},
       .outputs = 2,
       .tol = 0},
  };
}

inline std::vector<Case> squeeze(OpKind, DType) {
  return {
      {.name = "axes", .in = {x({1, 3, 1, 5}), i64({0, 2})}, .tol = 0},
      {.name = "all ones", .in = {x({1, 3, 1, 5})}, .tol = 0},
      {.name = "to scalar", .in = {x({1})}, .tol = 0},
      {.name = "zero-size", .in = {x({0, 1}), i64({-1})}, .tol = 0},
  };
}

inline std::vector<Case> unsqueeze(OpKind, DType) {
  return {
      {.name = "axes", .in = {x({3, 5}), i64({0, 3})}, .tol = 0},
      {.name = "scalar", .in = {x({}), i64({0})}, .tol = 0},
      {.name = "negative axis", .in = {x({0, 2}), i64({-1})}, .tol = 0},
  };
}

// LayoutReorder: plain <-> oneDNN's nChw16c, a permutation (exact); its index formula is
// checked by hand in test_layouts.cpp.
inline std::vector<Case> layout_reorder(OpKind, DType) {
  std::vector<Case> cs;
  for (bool to_blocked : {true, false}) {
    const std::string dir = to_blocked ? "to blocked" : "to plain";
    cs.push_back(
        {.name = dir, .in = {x({2, 32, 3, 5})}, .tol = 0, .params = ops::LayoutParams{to_blocked}});
    cs.push_back({.name = dir + ", 1x1 spatial",
                  .in = {x({3, 16, 1, 1})},
                  .tol = 0,
                  .params = ops::LayoutParams{to_blocked}});
  }
  return cs;
}

inline std::vector<Case> transpose(OpKind, DType) {
  return {
      {.name = "perm", .in = {x({2, 3, 4})}, .attrs = {{"perm", ints_attr({2, 0, 1})}}, .tol = 0},
      {.name = "reverse", .in = {x({2, 3, 5})}, .tol = 0},
      {.name = "odd sizes",
       .in = {x({13, 1, 7, 2})},
       .attrs = {{"perm", ints_attr({3, 1, 0, 2})}},
       .tol = 0},
      {.name = "zero-size", .in = {x({0, 4})}, .tol = 0},
      {.name = "large",
       .in = {x({8, 16, 32, 20})},
       .attrs = {{"perm", ints_attr({2, 0, 3, 1})}},
       .tol = 0},
  };
}

// Tile(input, repeats): every dtype, values moved exactly.
inline std::vector<Case> tile(OpKind, DType) {
  return {
      {.name = "[2,3] x [2,2]", .in = {x({2, 3}), i64({2, 2})}, .tol = 0},
      {.name = "inner repeat", .in = {x({3, 1, 5}), i64({1, 4, 3})}, .tol = 0},
      {.name = "ones", .in = {x({4, 5}), i64({1, 1})}, .tol = 0},
      {.name = "scalar", .in = {x({}), fixed(DType::I64, {0}, {})}, .tol = 0},
      {.name = "zero repeats", .in = {x({3, 2}), i64({0, 2})}, .tol = 0},
      {.name = "zero-size input", .in = {x({0, 2}), i64({3, 2})}, .tol = 0},
      {.name = "large", .in = {x({16, 33}), i64({4, 31})}, .tol = 0},
  };
}

// ---- constants and sequences --------------------------------------------------------------------
void ref_constant(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_constant_of_shape(const std::any& params, std::vector<Tensor>& in,
                           std::vector<Tensor>& out);

inline std::vector<Case> constant(OpKind, DType t) {
  return {
      {.name = "[2,3]",
       .in = {},
       .attrs = {{"value", tensor_of(t, {2, 3}, {1, 0, 3, 1, 5, 0})}},
       .ref = ref_constant},
      {.name = "scalar",
       .in = {},
       .attrs = {{"value", tensor_of(t, {}, {1})}},
       .ref = ref_constant},
      {.name = "zero-size",
       .in = {},
       .attrs = {{"value", tensor_of(t, {0}, {})}},
       .ref = ref_constant},
  };
}

inline std::vector<Case> constant_of_shape(OpKind, DType) {
  std::vector<Case> cs;
  for (DType v :
       {DType::F32, DType::F16, DType::F64, DType::I64, DType::I32, DType::U8, DType::Bool})
    cs.push_back({.name = "value " + std::string(dtype_name(v)),
                  .in = {x({2}, list({2, 3}))},
                  .attrs = {{"value", tensor_of(v, {1}, {1})}},
                  .ref = ref_constant_of_shape});
  cs.push_back(
      {.name = "default value", .in = {x({3}, list({3, 1, 7}))}, .ref = ref_constant_of_shape});
  cs.push_back({.name = "zero-size",
                .in = {x({2}, list({0, 4}))},
                .attrs = {{"value", tensor_of(DType::F32, {1}, {2})}},
                .ref = ref_constant_of_shape});
  cs.push_back({.name = "scalar",
                .in = {x({0})},
                .attrs = {{"value", tensor_of(DType::I64, {1}, {3})}},
                .ref = ref_constant_of_shape});
  return cs;
}

inline std::vector<Case> range(OpKind, DType t) {
  if (is_float(t))
    return {{.name = "up", .in = {scalar(0.5), scalar(10.25), scalar(0.75)}},
            {.name = "down", .in = {scalar(5), scalar(-3), scalar(-1.5)}},
            {.name = "empty", .in = {scalar(1), scalar(1), scalar(1)}}};
  if (t == DType::U8 || t == DType::I8)
    return {{.name = "up", .in = {scalar(2), scalar(100), scalar(9)}},
            {.name = "empty", .in = {scalar(7), scalar(3), scalar(1)}}};
  return {{.name = "up", .in = {scalar(2), scalar(50), scalar(7)}},
          {.name = "down", .in = {scalar(10), scalar(-10), scalar(-3)}},
          {.name = "long", .in = {scalar(-1000), scalar(9000), scalar(1)}}};
}

inline std::vector<Case> gather_grad(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> data, int64_t axis, std::vector<int64_t> idx,
              Fill f) {
    return Case{
        .name = std::move(name),
        .in = {fwd_out(0), fixed(DType::I64, idx, f), fwd_shape(0)},
        .fwd = Fwd{"Gather", {x(data), fixed(DType::I64, idx, list({0}))}, {{"axis", axis}}},
        .tol = 10};
  };
  return {
      c("embedding, repeats", {50, 700}, 0, {16, 20}, ints(-50, 4)),
      c("middle axis", {6, 9, 300}, -2, {40}, ints(-9, 8)),
      c("negative indices", {5, 3}, 0, {4}, ints(-5, 4)),
      c("no indices", {5, 3}, 1, {0}, {}),
  };
}

inline std::vector<Case> slice_grad(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> d, std::vector<In> rest) {
    std::vector<In> fin{x(d)};
    fin.insert(fin.end(), rest.begin(), rest.end());
    return Case{.name = std::move(name),
                .in = {fwd_out(0), fwd_shape(0)},
                .fwd = Fwd{"Slice", fin},
                .tol = 0};
  };
  return {
      c("two axes", {5, 7}, {i64({1, 0}), i64({4, 7})}),
      c("negative step", {7}, {i64({-1}), i64({-8}), i64({0}), i64({-2})}),
      c("axis 1 step 3", {3, 13, 2}, {i64({1}), i64({100}), i64({1}), i64({3})}),
      c("empty", {5, 2}, {i64({3}), i64({3})}),
      c("large", {64, 300}, {i64({5, 1}), i64({60, 299}), i64({0, 1}), i64({1, 2})}),
  };
}

// Resize(X, roi, scales, sizes): every mode, coordinate transform and rounding; scales f32.
struct ResizeSpec {
  std::string name;
  std::vector<int64_t> x;
  std::vector<double> scales;  // empty: sizes
  std::vector<int64_t> sizes;
  AttrMap attrs;
};
inline const std::vector<ResizeSpec>& resize_specs() {
  auto a = [](const char* mode, const char* coord, const char* nearest = "round_prefer_floor") {
    return AttrMap{{"mode", std::string(mode)},
                   {"coordinate_transformation_mode", std::string(coord)},
                   {"nearest_mode", std::string(nearest)}};
  };
  static const std::vector<ResizeSpec> s = {
      {"bilinear up, half_pixel", {2, 3, 5, 7}, {1, 1, 2, 1.5}, {}, a("linear", "half_pixel")},
      {"bilinear down, align_corners",
       {1, 2, 9, 8},
       {1, 1, 0.5, 0.6},
       {},
       a("linear", "align_corners")},
      {"linear sizes, pytorch_half_pixel",
       {2, 2, 6, 5},
       {},
       {2, 2, 4, 1},
       a("linear", "pytorch_half_pixel")},
      {"linear 1-D asymmetric", {3, 11}, {1, 1.7}, {}, a("linear", "asymmetric")},
      {"trilinear, channels too", {1, 3, 4, 5, 3}, {}, {1, 5, 7, 3, 6}, a("linear", "half_pixel")},
      {"nearest up, round_prefer_floor",
       {2, 3, 4, 5},
       {1, 1, 2, 3},
       {},
       a("nearest", "asymmetric")},
      {"nearest, round_prefer_ceil",
       {1, 2, 5, 4},
       {},
       {1, 2, 8, 7},
       a("nearest", "half_pixel", "round_prefer_ceil")},
      {"nearest down, floor",
       {2, 2, 9, 7},
       {1, 1, 0.5, 0.4},
       {},
       a("nearest", "align_corners", "floor")},
      {"nearest, ceil, tf_half_pixel_for_nn",
       {1, 1, 6, 6},
       {},
       {1, 1, 4, 9},
       a("nearest", "tf_half_pixel_for_nn", "ceil")},
      {"cubic up, half_pixel", {1, 2, 5, 6}, {1, 1, 1.6, 2}, {}, a("cubic", "half_pixel")},
      {"cubic down, align_corners", {2, 1, 9, 8}, {}, {2, 1, 4, 5}, a("cubic", "align_corners")},
      {"cubic, exclude_outside, a = -0.5",
       {1, 2, 4, 7},
       {1, 1, 2, 0.7},
       {},
       [] {
         AttrMap m{{"mode", std::string("cubic")},
                   {"exclude_outside", int64_t{1}},
                   {"cubic_coeff_a", -0.5f}};
         return m;
       }()},
      {"large", {4, 8, 32, 32}, {1, 1, 2, 2}, {}, a("linear", "half_pixel")},
      {"zero batch", {0, 3, 4, 4}, {1, 1, 2, 2}, {}, a("linear", "half_pixel")},
  };
  return s;
}
inline std::vector<In> resize_inputs(const ResizeSpec& s) {
  std::vector<In> in{x(s.x), absent()};
  auto n = static_cast<int64_t>(s.scales.size());
  if (!s.scales.empty()) {
    in.push_back(fixed(DType::F32, {n}, list(s.scales)));
  } else {
    in.push_back(absent());
    in.push_back(i64(std::vector<double>(s.sizes.begin(), s.sizes.end())));
  }
  return in;
}

inline std::vector<Case> resize(OpKind, DType) {
  std::vector<Case> cs;
  for (const ResizeSpec& s : resize_specs())
    cs.push_back({.name = s.name, .in = resize_inputs(s), .attrs = s.attrs, .tol = 10});
  return cs;
}

// Upsample(X, scales): Resize-10 (asymmetric; nearest floors upsampling, ceils downsampling).
inline std::vector<Case> upsample(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> d, std::vector<double> sc, const char* mode) {
    auto n = static_cast<int64_t>(sc.size());
    return Case{.name = std::move(name),
                .in = {x(d), fixed(DType::F32, {n}, list(std::move(sc)))},
                .attrs = {{"mode", std::string(mode)}},
                .tol = 10};
  };
  return {c("nearest x2 x3", {1, 2, 3, 4}, {1, 1, 2, 3}, "nearest"),
          c("nearest down", {1, 2, 7, 9}, {1, 1, 0.5, 0.4}, "nearest"),
          c("linear", {2, 3, 4, 5}, {1, 1, 1.5, 2.5}, "linear")};
}

inline std::vector<Case> resize_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (const ResizeSpec& s : resize_specs())
    cs.push_back({.name = s.name,
                  .in = {fwd_out(0), fwd_shape(0)},
                  .fwd = Fwd{"Resize", resize_inputs(s), s.attrs},
                  .tol = 10});
  return cs;
}

// PadGrad(dY): the gradient of reflect and edge padding (folded back), of cropping pads. Its
// params are the forward's mode with the pads resolved over every dim (as Pad's vjp emits them).
inline std::vector<Case> pad_grad(OpKind, DType) {
  using M = ops::PadParams::Mode;
  auto c = [](std::string name, std::vector<int64_t> dy, M mode, std::vector<int64_t> pads) {
    ops::PadParams p;
    p.mode = mode;
    p.pads = PadList(pads.begin(), pads.end());
    return Case{.name = std::move(name), .in = {x(std::move(dy))}, .tol = 10, .params = p};
  };
  return {
      c("reflect", {2, 6, 9}, M::Reflect, {0, 1, 2, 0, 2, 3}),
      c("reflect wider than the dim", {3, 15}, M::Reflect, {0, 5, 0, 7}),
      c("edge", {6, 10}, M::Edge, {2, 1, 1, 4}),
      c("edge, one element", {6, 7}, M::Edge, {3, 0, 2, 3}),
      c("constant, negative pads", {4, 4}, M::Constant, {-1, 0, 1, -2}),
      c("edge, 3-D", {2, 3, 9}, M::Edge, {0, 0, 3, 0, 0, 2}),
      c("large", {67, 68}, M::Reflect, {1, 3, 2, 5}),
      c("rank 0", {}, M::Reflect, {}),
  };
}

}  // namespace cb::test::bops
