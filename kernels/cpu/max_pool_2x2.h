// The fast path of MaxPool and MaxPoolGrad for the pooling CNNs use most: 2-D, a 2x2 window at
// stride 2, no dilation, no padding, every window inside the input (floor mode). Same rules as
// the general kernels (pool.cpp, pool_grad.cpp): window order (0,0) (0,1) (1,0) (1,1), the first
// maximum wins, NaN wins over numbers. f32 runs 8 windows at a time, branch-free (GCC vector
// extensions): with real activations (ReLU zeros, ties) the compare-and-branch loop mispredicts
// on most windows and was 5-10x slower; a row's last windows go through the same vector code via
// small staging buffers. Other element types take the plain loop.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/kernel_util.h"

namespace cb::cpu {

inline bool is_max_pool_2x2(const WindowGeom& g) {
  return g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 && g.k[1] == 2 && g.k[2] == 2 &&
         g.s[1] == 2 && g.s[2] == 2 && g.d[1] == 1 && g.d[2] == 1 && g.p[1] == 0 && g.p[2] == 0 &&
         2 * g.out[1] <= g.in[1] && 2 * g.out[2] <= g.in[2];
}

namespace pool2x2 {

typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

template <typename V>
__attribute__((always_inline)) inline void load(V& v, const float* p) {
  __builtin_memcpy(&v, p, sizeof(V));
}
template <typename V>
__attribute__((always_inline)) inline void store(float* p, const V& v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

// The four inputs of 8 windows: a = r0[2w], b = r0[2w+1], c = r1[2w], d = r1[2w+1].
struct Quad {
  F8 a, b, c, d;
};
__attribute__((always_inline)) inline void load_quad(Quad& q, const float* r0, const float* r1) {
  F8 l0, h0, l1, h1;
  load(l0, r0);
  load(h0, r0 + 8);
  load(l1, r1);
  load(h1, r1 + 8);
  q.a = __builtin_shufflevector(l0, h0, 0, 2, 4, 6, 8, 10, 12, 14);
  q.b = __builtin_shufflevector(l0, h0, 1, 3, 5, 7, 9, 11, 13, 15);
  q.c = __builtin_shufflevector(l1, h1, 0, 2, 4, 6, 8, 10, 12, 14);
  q.d = __builtin_shufflevector(l1, h1, 1, 3, 5, 7, 9, 11, 13, 15);
}
// m = the window maxima: v replaces m where v > m, or v is NaN and m is not.
__attribute__((always_inline)) inline void max_of(const Quad& q, F8& m) {
  m = q.a;
  m = ((q.b > m) | ((q.b != q.b) & (m == m))) ? q.b : m;
  m = ((q.c > m) | ((q.c != q.c) & (m == m))) ? q.c : m;
  m = ((q.d > m) | ((q.d != q.d) & (m == m))) ? q.d : m;
}

// y [8] = maxima of 8 windows at r0, r1 (16 inputs each).
__attribute__((always_inline)) inline void forward8(const float* r0, const float* r1, float* y) {
  Quad q;
  load_quad(q, r0, r1);
  F8 m;
  max_of(q, m);
  store(y, m);
}

// d0, d1 [16] = each window's dy at its first maximum, 0 elsewhere.
__attribute__((always_inline)) inline void backward8(const float* r0, const float* r1,
                                                     const float* dy, float* d0, float* d1) {
  Quad q;
  load_quad(q, r0, r1);
  F8 m, g;
  max_of(q, m);
  load(g, dy);
  const I8 nan = m != m;  // the first NaN is the maximum
  const I8 ea = (q.a == m) | ((q.a != q.a) & nan);
  const I8 eb = ((q.b == m) | ((q.b != q.b) & nan)) & ~ea;
  const I8 ec = ((q.c == m) | ((q.c != q.c) & nan)) & ~ea & ~eb;
  const I8 ed = ~(ea | eb | ec);
  const F8 z = {};
  const F8 wa = ea ? g : z, wb = eb ? g : z, wc = ec ? g : z, wd = ed ? g : z;
  store(d0, __builtin_shufflevector(wa, wb, 0, 8, 1, 9, 2, 10, 3, 11));
  store(d0 + 8, __builtin_shufflevector(wa, wb, 4, 12, 5, 13, 6, 14, 7, 15));
  store(d1, __builtin_shufflevector(wc, wd, 0, 8, 1, 9, 2, 10, 3, 11));
  store(d1 + 8, __builtin_shufflevector(wc, wd, 4, 12, 5, 13, 6, 14, 7, 15));
}

// The last K < 8 windows of a row through the same vector code. The 16 inputs per row it loads
// run past the row into the next one (their lanes are computed and dropped) wherever the input
// buffer goes on that far (`direct`); only the buffer's last rows are staged in zeroed copies.
// Staging every row would be slower: the vector loads of freshly written narrower stores miss
// store-to-load forwarding. Results leave through a local buffer, K at a time.
template <int K>
__attribute__((always_inline)) inline void forward_tail(const float* r0, const float* r1, float* y,
                                                        bool direct) {
  float out[8];
  if (direct) {
    forward8(r0, r1, out);
  } else {
    float s0[16] = {}, s1[16] = {};
    std::memcpy(s0, r0, 2 * K * sizeof(float));
    std::memcpy(s1, r1, 2 * K * sizeof(float));
    forward8(s0, s1, out);
  }
  std::memcpy(y, out, K * sizeof(float));
}
template <int K>
__attribute__((always_inline)) inline void backward_tail(const float* r0, const float* r1,
                                                         const float* dy, float* d0, float* d1,
                                                         bool direct) {
  float t0[16], t1[16];
  if (direct) {
    backward8(r0, r1, dy, t0, t1);
  } else {
    float s0[16] = {}, s1[16] = {}, sg[8] = {};
    std::memcpy(s0, r0, 2 * K * sizeof(float));
    std::memcpy(s1, r1, 2 * K * sizeof(float));
    std::memcpy(sg, dy, K * sizeof(float));
    backward8(s0, s1, sg, t0, t1);
  }
  std::memcpy(d0, t0, 2 * K * sizeof(float));
  std::memcpy(d1, t1, 2 * K * sizeof(float));
}
// The cases 1..7 of a switch on the tail's length (CB_POOL_TAIL(K) defined at the use).
#define CB_POOL_TAILS \
  CB_POOL_TAIL(1)     \
  CB_POOL_TAIL(2)     \
  CB_POOL_TAIL(3)     \
  CB_POOL_TAIL(4)     \
  CB_POOL_TAIL(5)     \
  CB_POOL_TAIL(6)     \
  CB_POOL_TAIL(7)     \
  default:            \
    break;

using geom::pool_greater;

}  // namespace pool2x2

// Planes [p0, p1) of x [planes, I1, I2] -> y [planes, O1, O2].
template <typename T>
CB_CPU_CLONES void max_pool_2x2(const T* x, T* y, int64_t planes, int64_t p0, int64_t p1,
                                int64_t i1, int64_t i2, int64_t o1, int64_t o2) {
  using namespace pool2x2;
  const T* x_end = x + planes * i1 * i2;
  for (int64_t pc = p0; pc < p1; ++pc)
    for (int64_t oh = 0; oh < o1; ++oh) {
      const T* r0 = x + (pc * i1 + 2 * oh) * i2;
      const T* r1 = r0 + i2;
      T* yr = y + (pc * o1 + oh) * o2;
      int64_t ow = 0;
      if constexpr (std::is_same_v<T, float>) {
        for (; ow + 8 <= o2; ow += 8) forward8(r0 + 2 * ow, r1 + 2 * ow, yr + ow);
        const bool direct = r1 + 2 * ow + 16 <= x_end;
#define CB_POOL_TAIL(K)                                         \
  case K:                                                       \
    forward_tail<K>(r0 + 2 * ow, r1 + 2 * ow, yr + ow, direct); \
    break;
        switch (o2 - ow) { CB_POOL_TAILS }
#undef CB_POOL_TAIL
      } else {
        for (; ow < o2; ++ow) {
          T m = r0[2 * ow];
          for (T v : {r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]}) m = pool_greater(v, m) ? v : m;
          yr[ow] = m;
        }
      }
    }
}

// Planes [p0, p1) of x, dx [planes, I1, I2] and dy [planes, O1, O2]: the windows do not overlap, so
// each covered dx element is written once (dy at its window's first maximum, else 0) and the rows
// and columns no window covers get 0; no separate zero fill.
template <typename T>
CB_CPU_CLONES void max_pool_grad_2x2(const T* x, const T* dy, T* dx, int64_t planes, int64_t p0,
                                     int64_t p1, int64_t i1, int64_t i2, int64_t o1, int64_t o2) {
  using namespace pool2x2;
  const T *x_end = x + planes * i1 * i2, *dy_end = dy + planes * o1 * o2;
  for (int64_t pc = p0; pc < p1; ++pc) {
    for (int64_t oh = 0; oh < o1; ++oh) {
      const T* r0 = x + (pc * i1 + 2 * oh) * i2;
      const T* r1 = r0 + i2;
      T* d0 = dx + (pc * i1 + 2 * oh) * i2;
      T* d1 = d0 + i2;
      const T* g = dy + (pc * o1 + oh) * o2;
      int64_t ow = 0;
      if constexpr (std::is_same_v<T, float>) {
        for (; ow + 8 <= o2; ow += 8)
          backward8(r0 + 2 * ow, r1 + 2 * ow, g + ow, d0 + 2 * ow, d1 + 2 * ow);
        const bool direct = r1 + 2 * ow + 16 <= x_end && g + ow + 8 <= dy_end;
#define CB_POOL_TAIL(K)                                                                   \
  case K:                                                                                 \
    backward_tail<K>(r0 + 2 * ow, r1 + 2 * ow, g + ow, d0 + 2 * ow, d1 + 2 * ow, direct); \
    break;
        switch (o2 - ow) { CB_POOL_TAILS }
#undef CB_POOL_TAIL
      } else {
        for (; ow < o2; ++ow) {
          T m = r0[2 * ow];
          int k = 0;
          T v = r0[2 * ow + 1];
          if (pool_greater(v, m)) m = v, k = 1;
          v = r1[2 * ow];
          if (pool_greater(v, m)) m = v, k = 2;
          v = r1[2 * ow + 1];
          if (pool_greater(v, m)) k = 3;
          const T gv = g[ow];
          d0[2 * ow] = k == 0 ? gv : T(0);
          d0[2 * ow + 1] = k == 1 ? gv : T(0);
          d1[2 * ow] = k == 2 ? gv : T(0);
          d1[2 * ow + 1] = k == 3 ? gv : T(0);
        }
      }
      for (int64_t iw = 2 * o2; iw < i2; ++iw) d0[iw] = d1[iw] = T(0);
    }
    for (int64_t ih = 2 * o1; ih < i1; ++ih) {
      T* d = dx + (pc * i1 + ih) * i2;
      for (int64_t iw = 0; iw < i2; ++iw) d[iw] = T(0);
    }
  }
}

}  // namespace cb::cpu
