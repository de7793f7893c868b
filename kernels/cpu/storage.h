// Element access for activations that may be stored as bf16 (TensorView::bf16_storage): the
// kernels that read and write blocked values are templated on the storage type S (float, or
// uint16_t holding bf16 bits) and compute in float; stores round to nearest even.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_math.h"
#include "runtime/kernel_args.h"
#include "runtime/op_catalog.h"

namespace cb::cpu {

inline float load_s(const float* p, int64_t i) { return p[i]; }
inline float load_s(const uint16_t* p, int64_t i) { return math::bf16_to_f32(p[i]); }
inline void store_s(float* p, int64_t i, float v) { p[i] = v; }
// math::f32_to_bf16's rounding (nearest even; NaN stays a quiet NaN) as a select, not a branch,
// so that the loops around it vectorise.
inline void store_s(uint16_t* p, int64_t i, float v) {
  const uint32_t u = math::f32_bits(v);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
  p[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Calls f(S* tag) with S = uint16_t where the view is stored as bf16, else float.
template <class F>
decltype(auto) with_storage(bool bf16, F&& f) {
  if (bf16) return f(static_cast<uint16_t*>(nullptr));
  return f(static_cast<float*>(nullptr));
}

// The sums, in double over N and S, of block b's 16 channels of x [N, C/16, S, 16] (the blocked
// layout) stored as St: ConvGrad's bias gradient. Inline: called from CB_CPU_CLONES functions.
template <class St>
inline void block_sums(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b, double* sum) {
  for (int l = 0; l < 16; ++l) sum[l] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const St* p = x + (i * cb + b) * s * 16;
    for (int64_t j = 0; j < s; ++j)
      for (int l = 0; l < 16; ++l) sum[l] += load_s(p, j * 16 + l);
  }
}
// Their means: the first pass of BatchNorm's statistics, forward and backward.
template <class St>
inline void block_means(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b, double* mean) {
  block_sums(x, n, cb, s, b, mean);
  const int64_t count = n * s;
  for (int l = 0; l < 16; ++l) mean[l] = count ? mean[l] / static_cast<double>(count) : 0;
}

// Relu, ReluGrad, Clip, ClipGrad and Add whose output is stored as bf16 (bf16_storage.cpp); false
// for other ops.
bool bf16_storage_elementwise(OpKind op, const KernelArgs& a);

}  // namespace cb::cpu
