// glibc's vector math (libmvec) for the hot loops of one file: including this declares erff,
// expf and tanhf with GCC's simd attribute, as glibc's own <bits/math-vector.h> does only under
// -ffast-math, so that GCC vectorises loops calling them into calls of the vector variants
// (_ZGVeN16v_expf and the like: within a few ulp of the scalar functions) in every
// target_clones variant (kernel_util.h's CB_CPU_CLONES). IEEE semantics stay as they are
// everywhere else. A file including it must be compiled with -fno-math-errno (CMakeLists.txt:
// CB_VECTOR_MATH_SOURCES), or GCC keeps expf scalar, as it may set errno.
#pragma once

#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
extern "C" float erff(float) noexcept __attribute__((simd("notinbranch")));
extern "C" float expf(float) noexcept __attribute__((simd("notinbranch")));
extern "C" float tanhf(float) noexcept __attribute__((simd("notinbranch")));
#endif

#include <cstdint>

namespace cb::cpu {

// y[k] = e^(x[k] - shift), x and y the same or disjoint. libmvec's vector expf leaves its fast
// path for a whole vector when any lane is below about -87 (where exp underflows) and computes
// it through the scalar expf, 8x slower per element; a causal attention mask's -inf scores are
// half of every row. So expf sees such lanes clamped to -80 (in a pass of its own: in one loop
// GCC turns expf(low ? -80 : d) back into low ? e^-80 : expf(d)); they then get 0 below -110
// (e^-110 is below the smallest float: expf gives 0) and, the few between, the scalar expf.
// exp_shifted gives exactly 0 where x[k] - shift < kExpZero; it works in chunks of kExpChunk
// elements from x[0], so a prefix of a multiple of kExpChunk elements computes bit for bit as it
// does within the whole row.
constexpr float kExpZero = -110.0f;
constexpr int64_t kExpChunk = 64;
inline void exp_shifted(const float* x, float shift, float* y, int64_t n) {
  constexpr float kLow = -80.0f, kZero = kExpZero;
  constexpr int64_t kChunk = kExpChunk;
  float t[kChunk];
  int64_t rare = 0;
  for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const int64_t len = n - k0 < kChunk ? n - k0 : kChunk;
    const float* xs = x + k0;
    for (int64_t j = 0; j < len; ++j) {
      const float d = xs[j] - shift;
      t[j] = d < kLow ? kLow : d;
    }
    for (int64_t j = 0; j < len; ++j) t[j] = expf(t[j]);
    float* ys = y + k0;
    for (int64_t j = 0; j < len; ++j) {  // no branch: one vectorised loop
      const float d = xs[j] - shift;
      const bool low = d < kLow, band = low & (d > kZero);
      ys[j] = low ? (band ? d : 0.0f) : t[j];  // the argument marks the band: no exp is negative
      rare += band;
    }
  }
  if (rare > 0)
    for (int64_t k = 0; k < n; ++k)
      if (y[k] < 0.0f) y[k] = expf(y[k]);
}

}  // namespace cb::cpu
