// Finite-difference gradient checking for vjps (fp64, central differences), in the style of
// ONNX Runtime's gradient_checker: a one-node graph with the inputs as parameters, the loss
// sum(y * w) for a fixed random w (summed over the outputs it reads), the analytic gradients from
// build_training_graph + the executor, the numeric ones from (L(x+h) - L(x-h)) / 2h with fresh
// executors. Ops with a decomposition (OpDef::lower) are lowered as the importer does, and
// checked through it.
//
// How to add an op: write its vjp in runtime/ops/<op>.cpp (and kernels for any gradient op it
// emits), then add a GradCase to tests/test_gradcheck.cpp with inputs kept off kinks (no
// values near 0 for Relu, distinct values for MaxPool, |x| inside Clip's bounds or clearly out).
#pragma once

#include <cstring>

#include <string>
#include <vector>

#include "runtime/attributes.h"
#include "runtime/tensor.h"

namespace cb::testing {

struct GradInput {
  Tensor value;
  bool differentiate = true;  // a parameter (checked) or a constant input
};

struct GradCase {
  std::string op;
  std::vector<GradInput> inputs;
  AttrMap attrs;
  size_t outputs = 1;
  double rtol = 1e-5, atol = 1e-7;
  double step = 1e-6;
  int max_elements = 24;           // elements checked per input (evenly spaced)
  std::vector<size_t> read = {0};  // the outputs the loss reads: sum over k of sum(y_k * w_k)
};

// f64 tensor with values uniform in [lo, hi] (seeded), or `away` from zero by at least `gap`.
Tensor random_f64(std::vector<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1,
                  double gap = 0);
// A host tensor of `dtype` holding `values` (T of the dtype's size: double for F64, float for F32,
// uint8_t for Bool, int64_t for I64).
template <typename T>
Tensor tensor_of(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
  Tensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}
inline Tensor i64_tensor(std::vector<int64_t> dims, std::vector<int64_t> values) {
  return tensor_of(DType::I64, std::move(dims), values);
}

// Runs the check; reports each mismatch through doctest CHECKs.
void check_gradients(const GradCase& c);

// The analytic gradients alone, for rules finite differences cannot check (Max's ties): the loss
// weights w (y's elements, flat) and each input's gradient (flat; empty for constants).
struct GradValues {
  std::vector<double> w;
  std::vector<std::vector<double>> dx;
};
GradValues analytic_gradients(const GradCase& c);

}  // namespace cb::testing
