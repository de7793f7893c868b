// The case type of the op harness (tests/test_backend_ops.cpp) and the helpers every kernel
// family's case file (tests/backend_ops/*.h) uses. A case is a one-node graph: its inputs (dims,
// how values are drawn, the pair's dtype or a fixed one), its attributes (parsed by the op's own
// parse()), and what the harness needs to know about it (outputs dropped, tolerance, a scalar
// reference). Gradient ops take their params from a forward node emitted first (`fwd`), as their
// vjps do; optimizer steps, which have no parse/infer, give their params and outputs explicitly
// (`params`, `outs`). Values are drawn per dtype and kept where the op is defined: logs and roots
// of positives, divisors away from zero, indices in range, integer ranges that do not overflow
// int8.
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
  bool bf16 = false;       // the node computes in bf16 (set_compute_precision; f32 Conv/ConvGrad)
  bool winograd = false;   // choose_conv_algorithms runs on the graph (f32 Conv/ConvGrad)
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
// A zeroed tensor of `t`, and element i of `t` set to x (already inside the dtype's range):
// the harness's, defined in tests/test_backend_ops.cpp.
Tensor make_tensor(DType t, std::vector<int64_t> dims);
void put(Tensor& t, int64_t i, double x);
// A tensor of `t` holding v (tests/backend_ops/references.cpp).
TensorPtr tensor_of(DType t, std::vector<int64_t> dims, std::vector<double> v);

}  // namespace cb::test::bops
