// Element access for activations that may be stored as bf16 (TensorView::bf16_storage): the
// kernels that read and write blocked values are templated on the storage type S (float, or
// uint16_t holding bf16 bits) and compute in float; stores round to nearest even.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/plane_sum.h"
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

// Statistics over a blocked value x [N, C/16, S, 16] (the blocked layout) stored as St, one block
// b of 16 channels at a time, the lanes side by side as two 8-float vectors (plane_sum.h's
// Lanes): each lane sums kStatChunk positions in f32 (the one-quantity sums in two accumulators
// taking alternate positions, so the adds' latency overlaps; the gradient's three sums in one
// each), and each chunk's total goes into a double. f32 vectors of 8 do twice the work of double
// ones per instruction and need no conversions; runs of 16-32 f32 adds keep the sums about as
// accurate as the double ones were (with runs of 64, ResNet-20 trained 3 steps blocked moved
// 2.5e-5 from the plain layout, past test_layouts' bound of 1e-5).
// Inline: called from CB_CPU_CLONES functions (BatchNorm forward and backward, ConvGrad's bias
// gradient), forced (CB_STAT_INLINE).
inline constexpr int64_t kStatChunk = 32;
using F8 = Lanes<float>::V;

// 16 consecutive stored values as two 8-lane f32 vectors, and back. The lanes' order depends on
// the storage (lane_of): float keeps positions 0-7 in the first vector and 8-15 in the second;
// bf16 puts the even positions in the first and the odd ones in the second, so that one 32-byte
// load splits into both by a shift and a mask (each 32-bit word holds an even value in its low
// half, an odd one in its high half), where widening in position order takes two shuffles per
// vector and GCC's code for it six instructions per 8 values. Elementwise code does not see the
// order (store16 undoes load16's); code that pairs lanes with per-channel values (a block's 16
// channels) takes those in the same order (lanes16) and gives sums back through add_lanes.
using U8 = Lanes<uint32_t>::V;
template <class St>
constexpr int lane_of(int half, int i) {  // the position (channel) of lane i of vector `half`
  return std::is_same_v<St, float> ? half * 8 + i : 2 * i + half;
}
CB_STAT_INLINE inline void load16(const float* p, F8& lo, F8& hi) {
  load_lanes(lo, p);
  load_lanes(hi, p + 8);
}
CB_STAT_INLINE inline void load16(const uint16_t* p, F8& even, F8& odd) {
  U8 w;
  __builtin_memcpy(&w, p, sizeof w);
  const U8 e = w << 16, o = w & 0xffff0000u;  // bf16 bits in the high half are the f32's
  __builtin_memcpy(&even, &e, sizeof e);
  __builtin_memcpy(&odd, &o, sizeof o);
}
CB_STAT_INLINE inline void store16(float* p, const F8& lo, const F8& hi) {
  __builtin_memcpy(p, &lo, sizeof lo);
  __builtin_memcpy(p + 8, &hi, sizeof hi);
}
// store_s's rounding (nearest even; NaN a quiet NaN), the bf16 in each word's high half (out by
// reference: a vector return changes the ABI where AVX is off).
CB_STAT_INLINE inline void bf16_high(const F8& v, U8& r) {
  U8 u;
  __builtin_memcpy(&u, &v, sizeof u);
  const U8 is_nan = (U8)((u & 0x7fffffffu) > 0x7f800000u);
  r = (is_nan & (u | 0x400000u)) | (~is_nan & (u + 0x7fffu + ((u >> 16) & 1u)));
}
CB_STAT_INLINE inline void store16(uint16_t* p, const F8& even, const F8& odd) {
  U8 e, o;
  bf16_high(even, e);
  bf16_high(odd, o);
  const U8 w = (e >> 16) | (o & 0xffff0000u);
  __builtin_memcpy(p, &w, sizeof w);
}
// A block's 16 per-channel values v as two f32 vectors in St's lane order.
template <class St, class T>
CB_STAT_INLINE inline void lanes16(const T* v, F8& a, F8& b) {
  for (int l = 0; l < 8; ++l)
    a[l] = static_cast<float>(v[lane_of<St>(0, l)]),
    b[l] = static_cast<float>(v[lane_of<St>(1, l)]);
}
// total[channel] += its lane of a or b (St's order), in double.
template <class St>
CB_STAT_INLINE inline void add_lanes(double* total, const F8& a, const F8& b) {
  for (int l = 0; l < 8; ++l) total[lane_of<St>(0, l)] += a[l], total[lane_of<St>(1, l)] += b[l];
}

// Calls f(at, j0, j1) for each chunk of positions [j0, j1) of block b, sample by sample: the
// chunk's elements are [at + 16 j0, at + 16 j1).
template <class F>
CB_STAT_INLINE inline void for_block_chunks(int64_t n, int64_t cb, int64_t s, int64_t b, F&& f) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = (i * cb + b) * s * 16;
    for (int64_t j0 = 0; j0 < s; j0 += kStatChunk) f(at, j0, std::min(s, j0 + kStatChunk));
  }
}

// out[l] = the sum over channel l of block b (N and S) of term(v, m): v 8 lanes of x, m those
// lanes of mean (lanes16; zero without one).
template <class St, class Term>
CB_STAT_INLINE inline void block_term_sums(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b,
                                           const double* mean, Term term, double* out) {
  F8 m0 = {}, m1 = {};
  if (mean) lanes16<St>(mean, m0, m1);
  for (int l = 0; l < 16; ++l) out[l] = 0;
  for_block_chunks(n, cb, s, b, [&](int64_t at, int64_t j, int64_t j1) CB_STAT_INLINE {
    const St* p = x + at;
    F8 a0 = {}, a1 = {}, c0 = {}, c1 = {}, v0, v1, w0, w1;
    for (; j + 1 < j1; j += 2) {
      load16(p + j * 16, v0, v1);
      load16(p + (j + 1) * 16, w0, w1);
      a0 += term(v0, m0), a1 += term(v1, m1), c0 += term(w0, m0), c1 += term(w1, m1);
    }
    if (j < j1) load16(p + j * 16, v0, v1), a0 += term(v0, m0), a1 += term(v1, m1);
    add_lanes<St>(out, a0 + c0, a1 + c1);
  });
}
// sum[l] = the sum of channel l of block b over N and S.
template <class St>
CB_STAT_INLINE inline void block_sums(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b,
                                      double* sum) {
  block_term_sums(
      x, n, cb, s, b, nullptr, [](const F8& v, const F8&) CB_STAT_INLINE { return v; }, sum);
}
// Their means: the first pass of BatchNorm's statistics, forward and backward.
template <class St>
CB_STAT_INLINE inline void block_means(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b,
                                       double* mean) {
  block_sums(x, n, cb, s, b, mean);
  const int64_t count = n * s;
  for (int l = 0; l < 16; ++l) mean[l] = count ? mean[l] / static_cast<double>(count) : 0;
}
// sq[l] = the sum of (x - mean[l])^2 over channel l (the mean rounded to f32, as plane_sum_sq_dev
// takes it): BatchNorm's two-pass variance.
template <class St>
CB_STAT_INLINE inline void block_sq_devs(const St* x, int64_t n, int64_t cb, int64_t s, int64_t b,
                                         const double* mean, double* sq) {
  block_term_sums(
      x, n, cb, s, b, mean,
      [](const F8& v, const F8& m) CB_STAT_INLINE {
        const F8 d = v - m;
        return d * d;
      },
      sq);
}
// BatchNorm's forward over blocks of at least this many bytes (16 channels, all samples) runs a
// block at a time with its passes split by sample (batch_normalization.cpp); smaller blocks run
// whole, a block to a thread. (Its gradient, which streams two values, X and dY, gained nothing
// from the same split: it stays a block to a thread.)
inline constexpr int64_t kBnSplitBytes = int64_t{2} << 20;
// With d = x - mean[l] (f32) over channel l of x and dy (alike): sq[l] = sum(d^2),
// sdy[l] = sum(dy), sdyx[l] = sum(dy * d): BatchNormalizationGrad's sums. Mask (a fused
// activation's, BnActivation in scalar_math.h: v > 0 for Relu, as ReluGrad masks): dy counts only
// where v > lo && !(v >= hi); kMaskZ: v read from z (the activation's output, alike); kMaskAffine:
// v = x * mul[l] + add[l] (the forward's pre-activation value, its bits; bf16 storage passes
// bounds on v that give the stored z's mask, norm_grad.cpp's bf16_mask_bounds).
enum BnMask { kMaskNone, kMaskZ, kMaskAffine };
template <int Mask, class St>
CB_STAT_INLINE inline void block_grad_sums(const St* x, const St* dy, const St* z, int64_t n,
                                           int64_t cb, int64_t s, int64_t b, const double* mean,
                                           double* sq, double* sdy, double* sdyx, float lo = 0,
                                           float hi = 0, const float* mul = nullptr,
                                           const float* add = nullptr) {
  F8 m0, m1, k0 = {}, k1 = {}, c0 = {}, c1 = {};
  lanes16<St>(mean, m0, m1);
  if constexpr (Mask == kMaskAffine) lanes16<St>(mul, k0, k1), lanes16<St>(add, c0, c1);
  for (int l = 0; l < 16; ++l) sq[l] = sdy[l] = sdyx[l] = 0;
  for_block_chunks(n, cb, s, b, [&](int64_t at, int64_t j, int64_t j1) CB_STAT_INLINE {
    const St *p = x + at, *q = dy + at;
    F8 a0 = {}, a1 = {}, g0 = {}, g1 = {}, e0 = {}, e1 = {}, v0, v1, d0, d1;
    for (; j < j1; ++j) {
      load16(p + j * 16, v0, v1);
      load16(q + j * 16, d0, d1);
      if constexpr (Mask != kMaskNone) {
        const F8 zero = {}, l = zero + lo, h = zero + hi;
        F8 z0, z1;
        if constexpr (Mask == kMaskZ) {
          load16(z + at + j * 16, z0, z1);
        } else {
          z0 = v0 * k0 + c0;
          z1 = v1 * k1 + c1;
        }
        d0 = (z0 > l) & ~(z0 >= h) ? d0 : zero;
        d1 = (z1 > l) & ~(z1 >= h) ? d1 : zero;
      }
      v0 -= m0, v1 -= m1;
      a0 += v0 * v0, a1 += v1 * v1;
      g0 += d0, g1 += d1;
      e0 += d0 * v0, e1 += d1 * v1;
    }
    add_lanes<St>(sq, a0, a1);
    add_lanes<St>(sdy, g0, g1);
    add_lanes<St>(sdyx, e0, e1);
  });
}
// Relu, ReluGrad, Clip, ClipGrad and Add whose output is stored as bf16 (bf16_storage.cpp); false
// for other ops.
bool bf16_storage_elementwise(OpKind op, const KernelArgs& a);

}  // namespace cb::cpu
