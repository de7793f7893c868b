// The case table of the op harness (tests/test_backend_ops.cpp): for every op, a function giving
// its cases for one dtype. A case is a one-node graph: its inputs (dims, how values are drawn, the
// pair's dtype or a fixed one), its attributes (parsed by the op's own parse()), and what the
// harness needs to know about it (outputs dropped, tolerance, a scalar reference). Gradient ops
// take their params from a forward node emitted first (`fwd`), as their vjps do; optimizer steps,
// which have no parse/infer, give their params and outputs explicitly (`params`, `outs`).
// Values are drawn per dtype and kept where the op is defined: logs and roots of positives,
// divisors away from zero, indices in range, integer ranges that do not overflow int8.
#pragma once

#include <any>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "runtime/attributes.h"
#include "runtime/dtype.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/tensor.h"

namespace cb::test::bops {

// How an input's values are drawn (as doubles, then rounded to the input's dtype).
struct Fill {
  enum Kind {
    Default,   // per dtype: floats in [-2, 2], i64/i32 [-1000, 1000], i8 [-100, 100], u8, bool
    Positive,  // floats in [0.05, 4], integers in [1, 9]
    Nonzero,   // floats with 0.5 <= |x| <= 2, integers 1 <= |x| <= 9 (u8: 1..20)
    Small,     // products that fit: i8 [-11, 11], u8 [0, 15], else as Default
    Uniform,   // [lo, hi], with |x| >= gap when gap > 0 (rounded for integer dtypes)
    Ints,      // integers uniform in [lo, hi]
    List,      // values, cycled
    Poison,    // NaN (floats), 0xCD bytes: what every output starts as unless `start`
  } kind = Default;
  double lo = -1, hi = 1, gap = 0;
  std::vector<double> values = {};
};
inline Fill uniform(double lo, double hi, double gap = 0) { return {Fill::Uniform, lo, hi, gap}; }
inline Fill ints(double lo, double hi) { return {Fill::Ints, lo, hi}; }
inline Fill list(std::vector<double> v) { return {Fill::List, 0, 0, 0, std::move(v)}; }
inline Fill positive() { return {Fill::Positive}; }
inline Fill nonzero() { return {Fill::Nonzero}; }
inline Fill small() { return {Fill::Small}; }

struct In {
  std::vector<int64_t> dims = {};
  Fill fill = {};
  std::optional<DType> dtype = {};  // nullopt: the pair's dtype (the one under test)
  bool absent = false;              // an omitted optional input (kNoValue)
  int fwd_out = -1;                 // >= 0: dims of the forward node's output k
  int fwd_in_shape = -1;            // >= 0: i64 [rank] holding the forward node's input k dims
  // Converted to f64 for the reference; default: inputs of the pair's dtype (unless bool).
  std::optional<bool> ref_f64 = {};
  // An output of an op without infer() (Case::outs) that the kernel updates in place (optimizer
  // state): it starts with drawn values instead of poison.
  bool start = false;
};
// An input of the pair's dtype.
inline In x(std::vector<int64_t> dims, Fill f = {}) {
  return In{.dims = std::move(dims), .fill = f};
}
// An input of a fixed dtype (not converted for the reference unless `ref_f64`).
inline In fixed(DType t, std::vector<int64_t> dims, Fill f = {}, bool ref_f64 = false) {
  return In{.dims = std::move(dims), .fill = f, .dtype = t, .ref_f64 = ref_f64};
}
// An i64 vector (shapes, axes, pads, starts).
inline In i64(std::vector<double> v) {
  auto n = static_cast<int64_t>(v.size());
  return fixed(DType::I64, {n}, list(std::move(v)));
}
inline In scalar(double v) { return x({}, list({v})); }  // rank 0, the pair's dtype
inline In absent() { return In{.absent = true}; }
inline In fwd_out(int k, Fill f = {}) { return In{.fill = f, .fwd_out = k}; }
inline In fwd_shape(int k) { return In{.dtype = DType::I64, .fwd_in_shape = k}; }
// An output the kernel updates in place (read and written): it starts with drawn values.
inline In inout(In in) {
  in.start = true;
  return in;
}

// The forward node a gradient op takes its params from (it is built, never launched).
struct Fwd {
  std::string op;
  std::vector<In> in;
  AttrMap attrs = {};
  size_t outputs = 1;
};

// A scalar reference: f64 copies of the inputs and of the outputs (shaped, zero; in-place outputs
// hold their starting values) to fill. For ops without an f64 kernel, or whose results are not an
// f64 computation (constants).
using RefFn = void (*)(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

struct Case {
  std::string name;
  std::vector<In> in;
  AttrMap attrs = {};
  size_t outputs = 1;
  std::vector<size_t> omit = {};  // outputs dropped: the kernel gets data == nullptr
  std::optional<Fwd> fwd = {};
  double tol = 1;          // scales the dtype's tolerance (long reductions); 0: bit-exact values
  uint64_t seed = 0;       // KernelArgs::seed (Dropout)
  bool trunc_ref = false;  // integer results: the f64 reference truncated toward 0 (Div, Mean)
  // Ops without infer() (optimizer and SMA steps): explicit params and outputs, no graph. Ops
  // without parse() but with infer() get `params` through GraphBuilder::emit_with.
  std::any params = {};
  std::vector<In> outs = {};  // poisoned, or starting values where `start` (in-place updates)
  RefFn ref = nullptr;
};

using CaseFn = std::vector<Case> (*)(OpKind op, DType t);

// ---- small helpers ------------------------------------------------------------------------------
inline bool is_float(DType t) { return dtype_is_float(t); }
inline AttrValue ints_attr(std::vector<int64_t> v) { return v; }
TensorPtr tensor_of(DType t, std::vector<int64_t> dims, std::vector<double> v);

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

// ---- softmax, normalization, dropout, loss ------------------------------------------------------
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

inline std::vector<Case> dropout(OpKind, DType) {
  auto ratio = [](double r) { return fixed(DType::F32, {}, list({r})); };
  auto mode = [](double m) { return fixed(DType::Bool, {}, list({m})); };
  return {
      {.name = "training", .in = {x({13, 7}), ratio(0.3), mode(1)}, .outputs = 2, .seed = 42},
      {.name = "training, no mask", .in = {x({5, 3}), ratio(0.5), mode(1)}, .seed = 7},
      {.name = "training, seed attribute",
       .in = {x({4, 9}), ratio(0.2), mode(1)},
       .attrs = {{"seed", int64_t{5}}},
       .outputs = 2,
       .seed = 3},
      {.name = "training large",
       .in = {x({3, 4099}), ratio(0.6), mode(1)},
       .outputs = 2,
       .seed = 11},
      {.name = "inference", .in = {x({13, 7}), ratio(0.3), mode(0)}, .outputs = 2, .seed = 42},
      {.name = "default: inference", .in = {x({6})}, .outputs = 2},
      {.name = "zero-size", .in = {x({0, 4}), ratio(0.3), mode(1)}, .outputs = 2, .seed = 1},
  };
}

inline std::vector<Case> dropout_grad(OpKind, DType) {
  auto c = [](std::vector<int64_t> d, double ratio) {
    return Case{
        .name = "mask",
        .in = {fwd_out(0), fixed(DType::Bool, d, ints(0, 1))},
        .fwd = Fwd{"Dropout",
                   {x(d), fixed(DType::F32, {}, list({ratio})), fixed(DType::Bool, {}, list({1}))},
                   {},
                   2}};
  };
  return {c({13, 7}, 0.3), c({3, 4099}, 0.6), c({0, 2}, 0.5)};
}

// SoftmaxCrossEntropyLoss and its gradient against a naive f64 reference
// (tests/test_backend_ops.cpp), so the [N,C] fast path and the general path (N-D scores, weights)
// are checked independently.
void ref_sce(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_sce_grad(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

inline std::vector<Case> sce_loss(OpKind, DType) {
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
          c("N-D, large", {8, 33, 17, 9}, "mean")};
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

inline std::vector<Case> conv(OpKind, DType) {
  std::vector<Case> cs;
  for (const ConvSpec& s : conv_specs()) {
    Case c{.name = s.name, .in = {x(s.x), x(s.w)}, .attrs = s.attrs, .tol = 10};
    if (s.bias) c.in.push_back(x({s.w[0]}));
    cs.push_back(c);
  }
  return cs;
}

inline std::vector<Case> conv_grad(OpKind, DType) {
  std::vector<Case> cs;
  for (const ConvSpec& s : conv_specs()) {
    Fwd f{"Conv", {x(s.x), x(s.w)}, s.attrs};
    if (s.bias) f.in.push_back(x({s.w[0]}));
    // dX, dW and dB; without dX (a first layer: the single-channel dW loops); without dW
    for (std::vector<size_t> omit : {std::vector<size_t>{}, {0}, {1}})
      cs.push_back({.name = s.name,
                    .in = {fwd_out(0), x(s.x), x(s.w)},
                    .outputs = 3,
                    .omit = omit,
                    .fwd = f,
                    .tol = 10});
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

inline std::vector<Case> gemm(OpKind, DType) {
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
  cs.push_back({.name = "K = 0", .in = {x({5, 0}), x({0, 4}), x({4})}, .attrs = {{"beta", 0.5f}}});
  cs.push_back({.name = "K = 0, no C", .in = {x({5, 0}), x({0, 4})}});
  cs.push_back({.name = "M = 0", .in = {x({0, 3}), x({3, 4}), x({4})}});
  cs.push_back({.name = "vector", .in = {x({1, 13}), x({13, 1})}});
  return cs;
}

inline std::vector<Case> matmul(OpKind, DType) {
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
  return cs;
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

// ---- optimizer and SMA steps --------------------------------------------------------------------
// Inputs are read only; every buffer a step updates is an output that starts with drawn values
// (`inout`). No parse/infer: explicit params and outputs, launched without a graph; once the ops
// have infer(), the harness builds their graphs itself (params through emit_with).
void ref_sma_step(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);
void ref_sma_central_step(const std::any& params, std::vector<Tensor>& in,
                          std::vector<Tensor>& out);
void ref_sma_row_sum(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

inline std::vector<Case> sgd_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t n, ops::SgdParams p) {
    cs.push_back({.name = std::move(name),
                  .in = {x({n})},
                  .params = p,
                  .outs = {inout(x({n})), p.momentum != 0 ? inout(x({n})) : absent()}});
  };
  c("plain", 13, {.lr = 0.1f});
  c("momentum, first step", 1000, {.lr = 0.05f, .momentum = 0.9f, .first_step = true});
  c("momentum, dampening, weight decay", 1000,
    {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-2f, .dampening = 0.1f, .first_step = false});
  c("nesterov, large", 20011,
    {.lr = 0.01f, .momentum = 0.8f, .nesterov = true, .first_step = false});
  c("empty", 0, {.lr = 0.1f, .momentum = 0.9f, .first_step = false});
  return cs;
}

inline std::vector<Case> adamw_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t n, ops::AdamWParams p) {
    cs.push_back({.name = std::move(name),
                  .in = {x({n})},
                  .params = p,
                  .outs = {inout(x({n})), inout(x({n}, uniform(-0.1, 0.1))),
                           inout(x({n}, uniform(0, 0.05)))}});
  };
  c("step 1", 13, {.lr = 1e-3f});
  c("step 7, no decay", 1000, {.lr = 1e-2f, .weight_decay = 0, .step = 7});
  c("large", 20011,
    {.lr = 1e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f, .step = 3});
  return cs;
}

// SmaStep(grad [R,P], z [P]?) -> (param, opt1, opt2?, snapshot [R,P], sum [P]?, steps i64 [R]).
inline std::vector<Case> sma_step(OpKind, DType) {
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t rows, int64_t n, ops::SmaStepParams p, bool pull,
               std::vector<double> steps) {
    const bool adamw = p.optimizer == ops::OptimizerKind::AdamW;
    Case k{.name = std::move(name),
           .in = {x({rows, n})},
           .params = p,
           .outs = {inout(x({rows, n})),
                    inout(adamw ? x({rows, n}, uniform(-0.1, 0.1)) : x({rows, n})),
                    adamw ? inout(x({rows, n}, uniform(0, 0.05))) : absent(), x({rows, n}),
                    pull ? x({n}) : absent(), inout(fixed(DType::I64, {rows}, list(steps)))},
           .ref = ref_sma_step};
    if (pull) k.in.push_back(x({n}));
    cs.push_back(k);
  };
  c("pull, momentum", 3, 1000,
    {.lr = 0.05f, .weight_decay = 1e-3f, .momentum = 0.9f, .alpha = 0.3f}, true, {0, 1, 5});
  c("pull, nesterov, large", 2, 5003,
    {.lr = 0.05f, .momentum = 0.9f, .nesterov = true, .alpha = 0.5f}, true, {2, 3});
  c("no pull (local SGD)", 2, 13, {.lr = 0.1f, .momentum = 0.9f}, false, {1, 1});
  c("alpha 0, no momentum", 1, 77, {.lr = 0.1f, .alpha = 0}, true, {0});
  c("AdamW, pull", 2, 1000,
    {.optimizer = ops::OptimizerKind::AdamW, .lr = 1e-2f, .weight_decay = 1e-2f, .alpha = 0.2f},
    true, {0, 6});
  return cs;
}

// SmaCentralStep(sum [P]) -> (z [P], z_prev [P], nonfinite f32 [1]).
inline std::vector<Case> sma_central_step(OpKind, DType) {
  auto c = [](std::string name, int64_t n, float mu) {
    return Case{.name = std::move(name),
                .in = {x({n})},
                .params = ops::SmaCentralStepParams{mu},
                .outs = {inout(x({n})), inout(x({n})), x({1})},
                .ref = ref_sma_central_step};
  };
  return {c("momentum", 1000, 0.9f), c("no momentum", 13, 0), c("large", 20011, 0.5f)};
}

inline std::vector<Case> sma_row_sum(OpKind, DType) {
  auto c = [](std::string name, int64_t rows, int64_t n, float scale) {
    return Case{.name = std::move(name),
                .in = {x({rows, n})},
                .params = ops::SmaRowSumParams{scale},
                .outs = {x({n})},
                .ref = ref_sma_row_sum};
  };
  return {c("3 rows", 3, 17, 1.0f / 3), c("one row", 1, 5, 1), c("large", 4, 10007, 0.25f)};
}

// ---- the table: every op with cases, in the catalog's order -------------------------------------
struct OpCases {
  OpKind op;
  CaseFn cases;
};
inline const std::vector<OpCases>& case_table() {
  static const std::vector<OpCases> t = {
      {OpKind::Abs, unary},
      {OpKind::Add, binary},
      {OpKind::And, logical},
      {OpKind::AveragePool, average_pool},
      {OpKind::BatchNormalization, batch_norm},
      {OpKind::Cast, cast},
      {OpKind::Ceil, unary},
      {OpKind::Clip, clip},
      {OpKind::Concat, concat},
      {OpKind::Constant, constant},
      {OpKind::ConstantOfShape, constant_of_shape},
      {OpKind::Conv, conv},
      {OpKind::ConvTranspose, conv_transpose},
      {OpKind::Div, binary},
      {OpKind::Dropout, dropout},
      {OpKind::Equal, equal},
      {OpKind::Erf, unary},
      {OpKind::Exp, unary},
      {OpKind::Expand, expand},
      {OpKind::Flatten, flatten},
      {OpKind::Floor, unary},
      {OpKind::Gather, gather},
      {OpKind::Gemm, gemm},
      {OpKind::GlobalAveragePool, global_average_pool},
      {OpKind::Greater, compare},
      {OpKind::GreaterOrEqual, compare},
      {OpKind::HardSigmoid, unary},
      {OpKind::HardSwish, unary},
      {OpKind::Identity, identity},
      {OpKind::LayerNormalization, layer_norm},
      {OpKind::LeakyRelu, unary},
      {OpKind::Less, compare},
      {OpKind::LessOrEqual, compare},
      {OpKind::Log, unary},
      {OpKind::LogSoftmax, softmax},
      {OpKind::MatMul, matmul},
      {OpKind::Max, variadic},
      {OpKind::MaxPool, max_pool},
      {OpKind::Mean, variadic},
      {OpKind::Min, variadic},
      {OpKind::Mul, binary},
      {OpKind::Neg, unary},
      {OpKind::Not, logical},
      {OpKind::Or, logical},
      {OpKind::Pad, pad},
      {OpKind::Pow, pow_cases},
      {OpKind::Range, range},
      {OpKind::Reciprocal, unary},
      {OpKind::ReduceL1, reduce},
      {OpKind::ReduceL2, reduce},
      {OpKind::ReduceLogSum, reduce},
      {OpKind::ReduceLogSumExp, reduce},
      {OpKind::ReduceMax, reduce},
      {OpKind::ReduceMean, reduce},
      {OpKind::ReduceMin, reduce},
      {OpKind::ReduceProd, reduce},
      {OpKind::ReduceSum, reduce},
      {OpKind::ReduceSumSquare, reduce},
      {OpKind::Relu, unary},
      {OpKind::Reshape, reshape},
      {OpKind::Resize, resize},
      {OpKind::Shape, shape},
      {OpKind::Sigmoid, unary},
      {OpKind::Slice, slice},
      {OpKind::Softmax, softmax},
      {OpKind::SoftmaxCrossEntropyLoss, sce_loss},
      {OpKind::Split, split},
      {OpKind::Sqrt, unary},
      {OpKind::Squeeze, squeeze},
      {OpKind::Sub, binary},
      {OpKind::Sum, variadic},
      {OpKind::Tanh, unary},
      {OpKind::Tile, tile},
      {OpKind::Transpose, transpose},
      {OpKind::Unsqueeze, unsqueeze},
      {OpKind::Upsample, upsample},
      {OpKind::Where, where},
      {OpKind::Xor, logical},
      // internal: gradients
      {OpKind::AveragePoolGrad, average_pool_grad},
      {OpKind::BatchNormalizationGrad, batch_norm_grad},
      {OpKind::ClipGrad, clip_grad},
      {OpKind::ConvGrad, conv_grad},
      {OpKind::DropoutGrad, dropout_grad},
      {OpKind::GatherGrad, gather_grad},
      {OpKind::HardSigmoidGrad, hard_sigmoid_grad},
      {OpKind::HardSwishGrad, hard_sigmoid_grad},
      {OpKind::LayerNormalizationGrad, layer_norm_grad},
      {OpKind::LeakyReluGrad, leaky_relu_grad},
      {OpKind::LogSoftmaxGrad, softmax_grad},
      {OpKind::MaxPoolGrad, max_pool_grad},
      {OpKind::PadGrad, pad_grad},
      {OpKind::ReduceSumTo, reduce_sum_to},
      {OpKind::ReluGrad, relu_grad},
      {OpKind::ResizeGrad, resize_grad},
      {OpKind::SliceGrad, slice_grad},
      {OpKind::SoftmaxCrossEntropyLossGrad, sce_loss_grad},
      {OpKind::SoftmaxGrad, softmax_grad},
      // internal: optimizer and SMA steps (last: their contracts are about to change)
      {OpKind::AdamWStep, adamw_step},
      {OpKind::SgdStep, sgd_step},
      {OpKind::SmaCentralStep, sma_central_step},
      {OpKind::SmaRowSum, sma_row_sum},
      {OpKind::SmaStep, sma_step},
  };
  return t;
}

// Pairs a backend may claim that have no case, each with its reason. Anything else claimed
// without a case fails the harness.
struct Exclusion {
  OpKind op;
  std::vector<DType> dtypes;
  const char* why;
};
inline const std::vector<Exclusion>& exclusions() {
  using enum DType;
  static const std::vector<Exclusion> e = {
      {OpKind::ConstantOfShape,
       {F32, F16, BF16, F64, I32, I8, U8, Bool},
       "its one input is the i64 shape (ONNX: int64 only; infer() needs known integer contents); "
       "the CPU table claims every input dtype (kAll) because the kernel never reads the input"},
      {OpKind::Pow,
       {I8, U8},
       "ONNX Pow takes int32/int64/float bases only: infer() refuses int8/uint8, so no graph "
       "reaches these kernels; the CPU table claims them through kNumeric"},
  };
  return e;
}

}  // namespace cb::test::bops
