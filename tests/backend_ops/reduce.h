// Op harness cases of the reduce family (kernels/cpu/reduce.cpp, softmax.cpp, loss.cpp;
// kernels/cuda/reduce.cu): the Reduce* ops, ReduceSumTo, (Log)Softmax and its gradient, and
// SoftmaxCrossEntropyLoss and its gradient.
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- reductions ---------------------------------------------------------------------------------
// ReduceSum takes axes as an input (opset 13+), the others as an attribute (before opset 18).
// Values per op: products near 1 (floats) or in {-1, 0, 1} (integers, exact in the f64
// reference), positive for ReduceLogSum, a wide range for ReduceLogSumExp.
inline std::vector<Case> reduce(OpKind op, DType t) {
  const bool sum = op == OpKind::ReduceSum, narrow = t == DType::I8 || t == DType::U8;
  const bool mean = op == OpKind::ReduceMean,
             extremum = op == OpKind::ReduceMax || op == OpKind::ReduceMin;
  Fill f;
  // int8/uint8 means: sums that do not overflow (the mean divides the wrapped sum)
  if (narrow && mean) f = t == DType::U8 ? ints(0, 10) : ints(-5, 5);
  if (op == OpKind::ReduceProd) f = is_float(t) ? uniform(0.7, 1.4) : ints(-1, 1);
  if (op == OpKind::ReduceLogSum) f = positive();
  if (op == OpKind::ReduceLogSumExp) f = uniform(-20, 20);
  auto c = [&](std::string name, std::vector<int64_t> dims, std::optional<std::vector<double>> axes,
               int64_t keep, double tol = 1) {
    Case k{.name = std::move(name), .in = {x(std::move(dims), f)}, .tol = tol};
    k.attrs["keepdims"] = keep;
    if (axes && sum) k.in.push_back(i64(*axes));
    if (axes && !sum) {
      std::vector<int64_t> a(axes->begin(), axes->end());
      k.attrs["axes"] = a;
    }
    k.trunc_ref = mean && dtype_is_int(t);
    return k;
  };
  std::vector<Case> cs = {
      c("axis 1", {2, 3, 4}, std::vector<double>{1}, 1),
      c("axes 0,2 dropped", {2, 3, 4}, std::vector<double>{0, 2}, 0),
      c("axis -1", {3, 13}, std::vector<double>{-1}, 1),
      c("all", {2, 3, 4}, std::nullopt, 0),
      c("of a zero-size tensor", {0, 3}, std::vector<double>{1}, 0),
  };
  // An empty reduction gives the identity: -inf/+inf for float max/min, the type's lowest/highest
  // (which f64 cannot give) for integers.
  if (!extremum || is_float(t))
    cs.push_back(c("over a zero-size dim", {3, 0, 2}, std::vector<double>{1}, 1));
  if (!narrow || !mean) {
    cs.push_back(c("large, inner kept", {16, 9, 40, 30}, std::vector<double>{0, 2}, 1, 10));
    cs.push_back(c("large, inner reduced", {64, 9, 300}, std::vector<double>{2}, 0, 10));
  }
  if (extremum)
    cs.push_back({.name = "ties",
                  .in = {x({5, 6}, ints(0, 2))},
                  .attrs = {{"axes", ints_attr({1})}},
                  .tol = 0});
  if (sum) {
    Case noop = c("noop_with_empty_axes", {3, 5}, std::nullopt, 1);
    noop.attrs["noop_with_empty_axes"] = int64_t{1};
    cs.push_back(noop);
  }
  return cs;
}

inline std::vector<Case> reduce_sum_to(OpKind, DType) {
  return {
      {.name = "[2,3,4] to [3,1]", .in = {x({2, 3, 4}), i64({3, 1})}},
      {.name = "[5,7] to [7]", .in = {x({5, 7}), i64({7})}},
      {.name = "unchanged", .in = {x({4}), i64({4})}},
      {.name = "to scalar", .in = {x({2, 3}), fixed(DType::I64, {0}, {})}},
      {.name = "zero-size", .in = {x({0, 3}), i64({3})}},
      {.name = "large", .in = {x({64, 300}), i64({1, 300})}, .tol = 10},
  };
}

// ---- softmax and loss ---------------------------------------------------------------------------
inline std::vector<Case> softmax(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::vector<int64_t> d, int64_t axis) {
    cs.push_back(
        {.name = "axis", .in = {x(std::move(d), uniform(-30, 30))}, .attrs = {{"axis", axis}}});
  };
  c({13, 7}, -1);
  c({2, 3, 70}, 1);  // inner 70: more than one column tile
  for (int64_t axis : {0, 1, 3}) c({6, 5, 70, 3}, axis);
  c({1}, 0);
  c({}, -1);
  c({0, 5}, 1);
  c({64, 1000}, -1);
  // Rows spanning 220: exp of their shifted scores underflows to 0 (below -110), to subnormals
  // (from -110 to -80: the f32 rows' scalar pass) and stays normal (vector_math.h's exp_shifted).
  cs.push_back({.name = "scores spanning 220 (exp underflows)",
                .in = {x({16, 300}, uniform(-200, 20))},
                .attrs = {{"axis", int64_t{-1}}}});
  return cs;
}

inline std::vector<Case> softmax_grad(OpKind op, DType) {
  const char* fwd = op == OpKind::SoftmaxGrad ? "Softmax" : "LogSoftmax";
  Fill y = op == OpKind::SoftmaxGrad ? uniform(0, 1) : uniform(-3, 0.5);
  std::vector<Case> cs;
  auto c = [&](std::vector<int64_t> d, int64_t axis) {
    cs.push_back({.name = "axis",
                  .in = {fwd_out(0), fwd_out(0, y)},
                  .fwd = Fwd{fwd, {x(std::move(d))}, {{"axis", axis}}}});
  };
  c({13, 7}, -1);
  c({2, 3, 70}, 1);
  c({6, 5, 7, 3}, 0);
  c({0, 5}, 1);
  c({64, 1000}, -1);
  return cs;
}

// MaskedSoftmax(X, mask?) / MaskedSoftmaxGrad(dY, Y, mask?), params given (no attributes): the
// causal form (bool [1,1,T,T], -inf fill), the other Where order with a finite fill, BERT's
// additive [N,1,1,T] mask, a scale alone, a mask along the last dim only, and a long row. Y in
// the gradient's cases is drawn, not a softmax: the formula is checked elementwise either way.
inline std::vector<Case> masked_softmax(OpKind op, DType) {
  using P = ops::MaskedSoftmaxParams;
  const bool grad = op == OpKind::MaskedSoftmaxGrad;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Case> cs;
  auto c = [&](std::string name, std::vector<int64_t> d, P p, std::optional<In> mask) {
    Case k{.name = std::move(name), .params = p};
    if (grad)
      k.in = {x(d), x(d, uniform(0, 1))};
    else
      k.in = {x(d, uniform(-6, 6))};
    if (mask) k.in.push_back(*mask);
    cs.push_back(std::move(k));
  };
  auto where = [](std::vector<int64_t> d) { return fixed(DType::Bool, std::move(d), ints(0, 1)); };
  std::vector<double> causal;  // true above the diagonal: every row keeps one element at least
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) causal.push_back(j > i);
  c("causal", {2, 3, 5, 5}, P{0.125f, P::Mask::FillWhereTrue, static_cast<float>(-inf)},
    fixed(DType::Bool, {1, 1, 5, 5}, list(causal)));
  c("keep where true, finite fill", {3, 4, 9}, P{0.5f, P::Mask::FillWhereFalse, -1e4f},
    where({3, 1, 9}));
  c("additive", {4, 2, 6, 6}, P{0.25f, P::Mask::Add, 0}, x({4, 1, 1, 6}, uniform(-3, 0)));
  c("scale only", {5, 7}, P{2.0f, P::Mask::None, 0}, std::nullopt);
  c("mask along the last dim", {2, 3, 8}, P{1.0f, P::Mask::FillWhereTrue, -30}, where({8}));
  c("long rows", {4, 2, 1000}, P{0.1f, P::Mask::Add, 0}, x({1000}, uniform(-2, 0)));
  c("empty", {0, 4}, P{0.5f, P::Mask::None, 0}, std::nullopt);
  return cs;
}

// SoftmaxCrossEntropyLoss and its gradient against a naive f64 reference
// (tests/backend_ops/references.cpp), so the [N,C] fast path and the general path (N-D scores,
// weights) are checked independently.
void ref_sce(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_sce_grad(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

// Label smoothing is no ONNX attribute: these cases give SoftmaxCrossEntropyLossParams directly
// (e = 0.1). Scores [n, cls, d...], labels [n, d...].
using SceR = ops::SoftmaxCrossEntropyLossParams::Reduction;
inline Case sce_smoothed(std::string name, std::vector<int64_t> dims, SceR red,
                         std::optional<int64_t> ignore, std::optional<Fill> fill, bool grad) {
  const int64_t cls = dims[1];
  std::vector<int64_t> ld = dims;
  ld.erase(ld.begin() + 1);
  Fill labels = fill ? *fill : ints(0, double(cls - 1));
  Case k{.name = std::move(name),
         .in = {x(dims, uniform(-5, 5)), fixed(DType::I64, ld, labels)},
         .outputs = grad ? 1u : 2u,
         .params = ops::SoftmaxCrossEntropyLossParams{red, ignore, 0.1},
         .ref = grad ? ref_sce_grad : ref_sce};
  // The gradient's dloss: a scalar, or one per element (reduction none).
  if (grad) k.in.insert(k.in.begin(), x(red == SceR::None ? ld : std::vector<int64_t>{}));
  return k;
}

inline std::vector<Case> sce_loss(OpKind, DType) {
  using R = SceR;
  auto smoothed = [](std::string name, std::vector<int64_t> dims, R red,
                     std::optional<int64_t> ignore, std::optional<Fill> fill = {}) {
    return sce_smoothed(std::move(name), std::move(dims), red, ignore, fill, false);
  };
  // scores [n, cls, d...], labels [n, d...] drawn from `labels`, weights [cls] when `weighted`.
  auto c = [](std::string name, std::vector<int64_t> dims, std::string red, size_t outputs,
              DType label = DType::I64, std::optional<int64_t> ignore = {}, bool weighted = false,
              std::optional<Fill> labels = {}) {
    const int64_t cls = dims[1];
    std::vector<int64_t> ld = dims;
    ld.erase(ld.begin() + 1);
    Case k{.name = std::move(name),
           .in = {x(dims, uniform(-5, 5)),
                  fixed(label, ld, labels ? *labels : ints(0, double(cls - 1)))},
           .attrs = {{"reduction", red}},
           .outputs = outputs,
           .ref = ref_sce};
    if (weighted) k.in.push_back(x({cls}, uniform(0.2, 2)));
    if (ignore) k.attrs["ignore_index"] = *ignore;
    return k;
  };
  return {
      c("mean", {13, 7}, "mean", 2),
      c("sum, loss only", {5, 3}, "sum", 1),
      c("none, i32 labels", {9, 4}, "none", 2, DType::I32),
      c("mean, ignore_index", {16, 5}, "mean", 2, DType::I64, 2),
      c("i8 labels", {6, 3}, "sum", 2, DType::I8),
      c("large", {64, 1000}, "mean", 2),
      c("weights, mean, ignore_index", {12, 5}, "mean", 2, DType::I64, 1, true),
      c("weights, none", {7, 4}, "none", 1, DType::I32, {}, true),
      c("N-D, none, negative ignore_index", {3, 5, 2, 4}, "none", 2, DType::I64, -1, false,
        ints(-1, 4)),
      c("N-D weights, mean, ignore_index", {2, 6, 3, 5}, "mean", 2, DType::I64, 3, true),
      c("N-D weights, sum, ignore_index out of range", {4, 3, 7}, "sum", 1, DType::I8, 3, true,
        ints(0, 3)),
      c("N-D, mean, d = 1", {5, 4, 1, 1}, "mean", 2, DType::U8),
      c("N-D, large", {8, 33, 17, 9}, "mean", 1),
      smoothed("label smoothing, mean, ignore_index", {16, 5}, R::Mean, 2),
      smoothed("label smoothing, none", {9, 4}, R::None, {}),
      smoothed("label smoothing, N-D, sum, ignore_index", {3, 5, 2, 4}, R::Sum, -1, ints(-1, 4)),
      smoothed("label smoothing, N-D, large", {8, 33, 17, 9}, R::Mean, {}),
  };
}

inline std::vector<Case> sce_loss_grad(OpKind, DType) {
  auto c = [](std::string name, std::vector<int64_t> dims, std::string red,
              std::optional<int64_t> ignore = {}, bool weighted = false,
              std::optional<Fill> fill = {}) {
    const int64_t cls = dims[1];
    std::vector<int64_t> ld = dims;
    ld.erase(ld.begin() + 1);
    AttrMap attrs{{"reduction", red}};
    if (ignore) attrs["ignore_index"] = *ignore;
    Fill labels = fill ? *fill : ints(0, double(cls - 1));
    Case k{.name = std::move(name),
           .in = {fwd_out(0), x(dims, uniform(-5, 5)), fixed(DType::I64, ld, labels)},
           .fwd = Fwd{"SoftmaxCrossEntropyLoss", {x(dims), fixed(DType::I64, ld, labels)}, attrs},
           .ref = ref_sce_grad};
    if (weighted) {
      k.in.push_back(x({cls}, uniform(0.2, 2)));
      k.fwd->in.push_back(x({cls}));
    }
    return k;
  };
  return {c("mean", {13, 7}, "mean"),
          c("sum", {5, 3}, "sum"),
          c("none", {9, 4}, "none"),
          c("mean, ignore_index", {16, 5}, "mean", 2),
          c("large", {64, 1000}, "mean"),
          c("weights, mean, ignore_index", {12, 5}, "mean", 1, true),
          c("weights, none", {7, 4}, "none", {}, true),
          c("N-D, none, negative ignore_index", {3, 5, 2, 4}, "none", -1, false, ints(-1, 4)),
          c("N-D weights, mean, ignore_index", {2, 6, 3, 5}, "mean", 3, true),
          c("N-D weights, sum", {4, 3, 7}, "sum", {}, true),
          c("N-D, large", {8, 33, 17, 9}, "mean"),
          sce_smoothed("label smoothing, mean, ignore_index", {16, 5}, SceR::Mean, 2, {}, true),
          sce_smoothed("label smoothing, none", {9, 4}, SceR::None, {}, {}, true),
          sce_smoothed("label smoothing, N-D, mean, ignore_index", {2, 6, 3, 5}, SceR::Mean, 3,
                       ints(0, 5), true),
          sce_smoothed("label smoothing, N-D, large", {8, 33, 17, 9}, SceR::Mean, {}, {}, true)};
}

}  // namespace cb::test::bops
