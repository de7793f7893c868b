// Summing one contiguous run of values fast and accurately enough for statistics (BatchNorm's
// batch mean/variance and their gradients, GlobalAveragePool, bias gradients): 16 float (8
// double) lanes of independent accumulators, as two 32-byte GCC vectors (the loop vectorises at
// any ISA without reassociation flags; one scalar accumulator serialises on the add latency,
// ~10x slower), totals in double, the lanes added to them one by one in lane order. Inline: call
// them from a CB_CPU_CLONES function (kernel_util.h) so they get AVX2/AVX-512 code; 32 bytes is
// AVX2's register width, wider vectors spill to the stack there.
#pragma once

#include <cstdint>
#include <type_traits>

// Forces inlining into the CB_CPU_CLONES caller (lambdas too): a copy GCC keeps out of line is
// built for the baseline ISA (SSE2), not the caller's.
#define CB_STAT_INLINE __attribute__((always_inline))

namespace cb::cpu {

// 32 bytes of T, and loading one from memory of any alignment (by reference: a vector by value
// would change the ABI where AVX is off).
template <typename T>
struct Lanes {
  typedef T V __attribute__((vector_size(32)));
  static constexpr int64_t kCount = 32 / sizeof(T);
};
template <typename V, typename T>
inline void load_lanes(V& v, const T* p) {
  __builtin_memcpy(&v, p, sizeof(V));
}

// sum over i in [0, n) of x[i].
template <typename T>
inline double plane_sum(const T* x, int64_t n) {
  using V = typename Lanes<T>::V;
  constexpr int64_t L = Lanes<T>::kCount;
  V a0 = {}, a1 = {};
  int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    V v0, v1;
    load_lanes(v0, x + j);
    load_lanes(v1, x + j + L);
    a0 += v0;
    a1 += v1;
  }
  double total = 0;
  for (; j < n; ++j) total += x[j];
  for (int64_t l = 0; l < L; ++l) total += a0[l];  // lanes 0..2L-1 in order, in double
  for (int64_t l = 0; l < L; ++l) total += a1[l];
  return total;
}

// sum over i in [0, n) of (x[i] - mu)^2.
template <typename T>
inline double plane_sum_sq_dev(const T* x, int64_t n, T mu) {
  using V = typename Lanes<T>::V;
  constexpr int64_t L = Lanes<T>::kCount;
  V a0 = {}, a1 = {};
  int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    V d0, d1;
    load_lanes(d0, x + j);
    load_lanes(d1, x + j + L);
    d0 -= mu;
    d1 -= mu;
    a0 += d0 * d0;
    a1 += d1 * d1;
  }
  double total = 0;
  for (; j < n; ++j) total += (static_cast<double>(x[j]) - mu) * (static_cast<double>(x[j]) - mu);
  for (int64_t l = 0; l < L; ++l) total += a0[l];
  for (int64_t l = 0; l < L; ++l) total += a1[l];
  return total;
}

// With d = x - mu over [0, n): sq += sum(d^2), sdy += sum(dy), sdyx += sum(dy * d); dy counts
// only where a fused activation's output v satisfies v > lo && !(v >= hi) (BnActivation,
// scalar_math.h: v > 0 for Relu, as ReluGrad masks), v read from z, or with `affine` = {mul, add}
// computed as x * mul + add (the forward's pre-activation value: the same mask, not reading z).
template <typename T>
CB_STAT_INLINE inline void plane_sums(const T* x, const T* dy, const T* z, int64_t n, T mu,
                                      double& sq, double& sdy, double& sdyx, T lo = 0, T hi = 0,
                                      const T* affine = nullptr) {
  using V = typename Lanes<T>::V;
  constexpr int64_t L = Lanes<T>::kCount;
  // kMask: 0 none, 1 z, 2 affine
  auto sums = [&](auto mask) CB_STAT_INLINE {
    constexpr int kMask = decltype(mask)::value;
    V a0 = {}, a1 = {}, b0 = {}, b1 = {}, e0 = {}, e1 = {};
    int64_t j = 0;
    for (; j + 2 * L <= n; j += 2 * L) {
      V d0, d1, g0, g1;
      load_lanes(d0, x + j);
      load_lanes(d1, x + j + L);
      load_lanes(g0, dy + j);
      load_lanes(g1, dy + j + L);
      if constexpr (kMask != 0) {
        const V zero = {}, l = zero + lo, h = zero + hi;
        V z0, z1;
        if constexpr (kMask == 1) {
          load_lanes(z0, z + j);
          load_lanes(z1, z + j + L);
        } else {
          z0 = d0 * affine[0] + affine[1];
          z1 = d1 * affine[0] + affine[1];
        }
        g0 = (z0 > l) & ~(z0 >= h) ? g0 : zero;
        g1 = (z1 > l) & ~(z1 >= h) ? g1 : zero;
      }
      d0 -= mu;
      d1 -= mu;
      a0 += d0 * d0;
      a1 += d1 * d1;
      b0 += g0;
      b1 += g1;
      e0 += g0 * d0;
      e1 += g1 * d1;
    }
    for (; j < n; ++j) {
      const double d = static_cast<double>(x[j]) - mu;
      T v = T(0);
      if constexpr (kMask == 1) v = z[j];
      if constexpr (kMask == 2) v = x[j] * affine[0] + affine[1];
      const T g = kMask == 0 || (v > lo && !(v >= hi)) ? dy[j] : T(0);
      sq += d * d;
      sdy += g;
      sdyx += g * d;
    }
    for (int64_t l = 0; l < L; ++l) sq += a0[l], sdy += b0[l], sdyx += e0[l];
    for (int64_t l = 0; l < L; ++l) sq += a1[l], sdy += b1[l], sdyx += e1[l];
  };
  if (affine)
    sums(std::integral_constant<int, 2>{});
  else if (z)
    sums(std::integral_constant<int, 1>{});
  else
    sums(std::integral_constant<int, 0>{});
}

}  // namespace cb::cpu
