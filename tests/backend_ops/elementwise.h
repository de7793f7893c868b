// Op harness cases of the elementwise family (kernels/cpu/elementwise*.cpp, compare.cpp,
// hard_sigmoid.cpp; kernels/cuda/elementwise.cu): unary and binary math with broadcasting,
// comparisons, logic, variadic ops, Where, Clip, Cast, and the activations' gradients.
#pragma once

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

// ---- elementwise --------------------------------------------------------------------------------
// Unary: same shapes for every op, values kept where the op is defined.
inline std::vector<Case> unary(OpKind op, DType) {
  Fill f;
  switch (op) {  // test-side table of value ranges, not dispatch
    case OpKind::Log:
    case OpKind::Sqrt:
      f = uniform(0.01, 5);
      break;
    case OpKind::Reciprocal:
      f = uniform(-3, 3, 0.2);
      break;
    case OpKind::Exp:
      f = uniform(-8, 8);
      break;
    case OpKind::Sigmoid:
      f = uniform(-12, 12);
      break;
    case OpKind::Tanh:
    case OpKind::Erf:
      f = uniform(-3, 3);
      break;
    case OpKind::Ceil:
    case OpKind::Floor:
      f = uniform(-5, 5);
      break;
    case OpKind::HardSigmoid:
    case OpKind::HardSwish:
      f = uniform(-5, 5);  // both kinks and the linear part
      break;
    case OpKind::Gelu:
      f = uniform(-6, 6);  // both tails (erf saturates near |x| = 4)
      break;
    default:
      break;  // Abs, Neg, Relu, LeakyRelu: the dtype's default range
  }
  AttrMap attrs;
  if (op == OpKind::LeakyRelu) attrs["alpha"] = 0.1f;
  if (op == OpKind::HardSigmoid) attrs = {{"alpha", 0.3f}, {"beta", 0.4f}};
  std::vector<Case> cs;
  for (std::vector<int64_t> d : {std::vector<int64_t>{7}, {13, 1, 5}, {}, {0, 3}, {3, 4099}})
    cs.push_back({.name = "unary", .in = {x(d, f)}, .attrs = attrs});
  if (op == OpKind::LeakyRelu) cs.push_back({.name = "default alpha", .in = {x({2, 9})}});
  if (op == OpKind::HardSigmoid)
    cs.push_back({.name = "default alpha, beta", .in = {x({2, 9}, uniform(-5, 5))}});
  if (op == OpKind::Gelu)
    for (std::vector<int64_t> d : {std::vector<int64_t>{7}, {3, 4099}})
      cs.push_back(
          {.name = "tanh", .in = {x(d, f)}, .attrs = {{"approximate", std::string("tanh")}}});
  return cs;
}

// Binary with numpy broadcasting: equal shapes, one- and two-sided broadcasts, scalars on either
// side, rank mismatch, a zero-size dim, and tensors large enough to be split over threads.
inline const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& binary_shapes() {
  static const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> s = {
      {{7}, {7}},
      {{13, 1, 5}, {1, 4, 5}},
      {{2, 3, 4}, {}},
      {{}, {5}},
      {{1}, {5, 7}},
      {{2, 3, 1, 9}, {3, 7, 1}},
      {{0, 3}, {3}},
      {{300, 1}, {37}},
      {{3, 4099}, {3, 4099}},
      {{4, 8, 64, 64}, {8, 1, 1}},
  };
  return s;
}

inline std::vector<Case> binary(OpKind op, DType t) {
  Fill a, b;
  if (op == OpKind::Mul) a = b = small();
  if (op == OpKind::Div) b = nonzero();
  std::vector<Case> cs;
  for (const auto& [da, db] : binary_shapes())
    cs.push_back({.name = "broadcast",
                  .in = {x(da, a), x(db, b)},
                  .trunc_ref = op == OpKind::Div && dtype_is_int(t)});
  return cs;
}

// Pow(X: T, Y: U): positive float bases (no NaN from fractional exponents), small integer powers.
inline std::vector<Case> pow_cases(OpKind, DType t) {
  std::vector<Case> cs;
  if (is_float(t)) {
    Fill base = uniform(0.2, 3), e = uniform(-2, 2);
    for (const auto& [da, db] : binary_shapes())
      cs.push_back({.name = "float exponent", .in = {x(da, base), x(db, e)}});
    cs.push_back(
        {.name = "i64 exponent", .in = {x({13, 5}, base), fixed(DType::I64, {5}, ints(0, 4))}});
    cs.push_back({.name = "i32 exponent", .in = {x({7}, base), fixed(DType::I32, {}, list({3}))}});
  } else {
    for (const auto& [da, db] : binary_shapes())
      cs.push_back({.name = "integer", .in = {x(da, ints(-5, 5)), x(db, ints(0, 5))}});
    cs.push_back({.name = "i64 exponent",
                  .in = {x({13, 5}, ints(-4, 4)), fixed(DType::I64, {5}, ints(0, 4), true)}});
  }
  return cs;
}

// Equal: values from a small set so that equal pairs occur.
inline std::vector<Case> equal(OpKind, DType t) {
  Fill f = t == DType::U8 ? ints(0, 3) : t == DType::Bool ? ints(0, 1) : ints(-2, 2);
  std::vector<Case> cs;
  for (const auto& [da, db] : binary_shapes())
    cs.push_back({.name = "equal", .in = {x(da, f), x(db, f)}});
  return cs;
}

// Greater, GreaterOrEqual, Less, LessOrEqual: values from a small set so that ties occur.
inline std::vector<Case> compare(OpKind, DType t) {
  Fill f = t == DType::U8 ? ints(0, 3) : ints(-2, 2);
  std::vector<Case> cs;
  for (const auto& [da, db] : binary_shapes())
    cs.push_back({.name = "compare", .in = {x(da, f), x(db, f)}});
  return cs;
}

// And, Or, Xor (broadcasting) and Not on bools.
inline std::vector<Case> logical(OpKind op, DType) {
  std::vector<Case> cs;
  if (op == OpKind::Not) {
    for (std::vector<int64_t> d : {std::vector<int64_t>{7}, {13, 1, 5}, {}, {0, 3}, {3, 4099}})
      cs.push_back({.name = "not", .in = {x(d)}});
    return cs;
  }
  for (const auto& [da, db] : binary_shapes())
    cs.push_back({.name = "logical", .in = {x(da), x(db)}});
  return cs;
}

// Max, Min, Mean, Sum over 1..4 inputs with multi-way broadcasting; small value sets for Max/Min
// so that ties occur.
inline std::vector<Case> variadic(OpKind op, DType t) {
  Fill f = (op == OpKind::Max || op == OpKind::Min) ? (t == DType::U8 ? ints(0, 3) : ints(-2, 2))
                                                    : Fill{};
  if ((op == OpKind::Max || op == OpKind::Min) && is_float(t)) f = {};
  std::vector<Case> cs = {
      {.name = "one input", .in = {x({13, 7}, f)}},
      {.name = "two, broadcast", .in = {x({13, 1, 5}, f), x({1, 4, 5}, f)}},
      {.name = "three, broadcast", .in = {x({3, 1}, f), x({}, f), x({2, 1, 4}, f)}},
      {.name = "four, equal shapes",
       .in = {x({2, 5}, f), x({2, 5}, f), x({2, 5}, f), x({2, 5}, f)}},
      {.name = "ties", .in = {x({6}, ints(1, 2)), x({6}, ints(1, 2)), x({1}, list({1}))}},
      {.name = "zero-size", .in = {x({0, 3}, f), x({3}, f)}},
      {.name = "large", .in = {x({64, 300}, f), x({300}, f), x({64, 1}, f)}},
  };
  return cs;
}

// Where(cond, X, Y): three-way broadcasting; X/Y of several dtypes (moved as bytes).
inline std::vector<Case> where(OpKind, DType) {
  std::vector<Case> cs;
  struct S {
    std::vector<int64_t> c, x, y;
  };
  const S shapes[] = {{{2, 1}, {3}, {}},
                      {{13, 7}, {13, 7}, {13, 7}},
                      {{}, {4}, {2, 4}},
                      {{0, 3}, {3}, {1}},
                      {{64, 200}, {200}, {64, 1}}};
  for (DType v : {DType::F32, DType::I64, DType::F16, DType::U8, DType::F64})
    for (const S& s : shapes)
      cs.push_back({.name = "where " + std::string(dtype_name(v)),
                    .in = {x(s.c, ints(0, 1)), fixed(v, s.x, {}, true), fixed(v, s.y, {}, true)},
                    .tol = 0});
  return cs;
}

// Clip(X, min?, max?): bounds as scalar inputs (opset >= 11), either may be absent.
inline std::vector<Case> clip(OpKind, DType t) {
  double lo = is_float(t) ? -0.5 : t == DType::U8 ? 10 : -3;
  double hi = is_float(t) ? 0.7 : t == DType::U8 ? 200 : 50;
  return {
      {.name = "min and max", .in = {x({13, 7}), scalar(lo), scalar(hi)}},
      {.name = "max only", .in = {x({2, 3, 5}), absent(), scalar(hi)}},
      {.name = "min only, [1] bound", .in = {x({11}), x({1}, list({lo}))}},
      {.name = "no bounds", .in = {x({4, 3})}},
      {.name = "zero-size", .in = {x({0, 5}), scalar(lo), scalar(hi)}},
      {.name = "large", .in = {x({40, 300}), scalar(lo), scalar(hi)}},
  };
}

// Cast: every target dtype. Floats beyond an integer target's range saturate (the f64 Cast does
// the same); integers narrowed to a smaller integer type wrap, which f64 cannot express: a scalar
// reference for integer sources.
void ref_cast_int(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
inline std::vector<Case> cast(OpKind, DType t) {
  std::vector<Case> cs;
  Fill f = is_float(t) ? uniform(-300, 300) : Fill{};
  RefFn ref = is_float(t) ? nullptr : ref_cast_int;
  for (DType to : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32,
                   DType::I8, DType::U8, DType::Bool})
    cs.push_back({.name = "to " + std::string(dtype_name(to)),
                  .in = {x({5, 7}, f)},
                  .attrs = {{"to", int64_t{dtype_to_onnx(to)}}},
                  .tol = 0,
                  .ref = ref});
  cs.push_back({.name = "zero-size",
                .in = {x({0}, f)},
                .attrs = {{"to", int64_t{1}}},
                .tol = 0,
                .ref = ref});
  cs.push_back(
      {.name = "large", .in = {x({9001}, f)}, .attrs = {{"to", int64_t{7}}}, .tol = 0, .ref = ref});
  return cs;
}

// ---- elementwise gradients ----------------------------------------------------------------------
inline std::vector<Case> relu_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (std::vector<int64_t> d : {std::vector<int64_t>{13, 7}, {0}, {3, 4099}})
    cs.push_back({.name = "relu grad", .in = {x(d), x(d, list({-1, 0, 0.5, 0, 2}))}});
  return cs;
}

inline std::vector<Case> leaky_relu_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (std::vector<int64_t> d : {std::vector<int64_t>{13, 7}, {0}, {3, 4099}})
    cs.push_back({.name = "leaky relu grad",
                  .in = {fwd_out(0), x(d)},
                  .fwd = Fwd{"LeakyRelu", {x(d)}, {{"alpha", 0.2f}}}});
  return cs;
}

// HardSigmoidGrad / HardSwishGrad(dY, X): X over both kinks, and on them exactly.
inline std::vector<Case> hard_sigmoid_grad(OpKind op, DType) {
  const bool sig = op == OpKind::HardSigmoidGrad;
  AttrMap attrs;
  if (sig) attrs = {{"alpha", 0.25f}, {"beta", 0.5f}};
  std::vector<Case> cs;
  for (std::vector<int64_t> d : {std::vector<int64_t>{13, 7}, {0}, {3, 4099}})
    cs.push_back({.name = "grad",
                  .in = {fwd_out(0), x(d, uniform(-5, 5))},
                  .fwd = Fwd{sig ? "HardSigmoid" : "HardSwish", {x(d)}, attrs}});
  cs.push_back({.name = "on the kinks",
                .in = {fwd_out(0), x({6}, list({-3, 3, -2, 2, 0, -4}))},
                .fwd = Fwd{sig ? "HardSigmoid" : "HardSwish", {x({6})}, attrs}});
  return cs;
}

// GeluGrad(dY, X), erf and tanh forms: X over both tails and 0.
inline std::vector<Case> gelu_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (const char* form : {"none", "tanh"})
    for (std::vector<int64_t> d : {std::vector<int64_t>{13, 7}, {0}, {3, 4099}})
      cs.push_back({.name = std::string("grad, ") + form,
                    .in = {fwd_out(0), x(d, uniform(-6, 6))},
                    .fwd = Fwd{"Gelu", {x(d)}, {{"approximate", std::string(form)}}}});
  return cs;
}

// ClipGrad(dY, X, min?, max?): X on the bounds exactly (the gradient passes there).
inline std::vector<Case> clip_grad(OpKind, DType) {
  Fill xs = list({-1, -0.5, -0.25, 0, 0.5, 0.75, 1, 0.5});
  return {
      {.name = "both bounds",
       .in = {fwd_out(0), x({13, 7}, xs), scalar(-0.5), scalar(0.5)},
       .fwd = Fwd{"Clip", {x({13, 7})}}},
      {.name = "max only",
       .in = {fwd_out(0), x({9}, xs), absent(), scalar(0.5)},
       .fwd = Fwd{"Clip", {x({9})}}},
      {.name = "no bounds", .in = {fwd_out(0), x({4, 3}, xs)}, .fwd = Fwd{"Clip", {x({4, 3})}}},
      {.name = "large",
       .in = {fwd_out(0), x({3, 4099}, xs), scalar(-0.5), scalar(0.5)},
       .fwd = Fwd{"Clip", {x({3, 4099})}}},
  };
}

}  // namespace cb::test::bops
