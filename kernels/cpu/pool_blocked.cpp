#include "kernels/cpu/pool_blocked.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/storage.h"
#include "runtime/error.h"

namespace cb::cpu {

namespace {

constexpr int kL = 16;  // channels per block

// A block's 16 channels as two vectors of 8 (GCC vector extensions, as max_pool_2x2.h: the lane
// loops written out per element unroll into scalar code branching on the NaN rule, and 16-lane
// vector compares are lowered lane by lane).
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
struct V16 {
  V8 lo, hi;
};
struct I16 {
  I8 lo, hi;
};

__attribute__((always_inline)) inline V8 load8(const float* p) {
  V8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, V8 v) {
  __builtin_memcpy(p, &v, sizeof v);
}
// A block's 16 values: float as they lie; bf16 through storage.h's load16/store16 (the even
// positions in lo, the odd in hi: one load, a shift and a mask, where widening in order costs
// GCC six instructions per 8 values; every operand and the float accumulators go through these,
// so no pool sees the order).
__attribute__((always_inline)) inline V16 load16(const float* p) {
  return {load8(p), load8(p + 8)};
}
__attribute__((always_inline)) inline V16 load16(const uint16_t* p) {
  V16 v;
  cpu::load16(p, v.lo, v.hi);
  return v;
}
__attribute__((always_inline)) inline void store16(float* p, const V16& v) {
  store8(p, v.lo);
  store8(p + 8, v.hi);
}
__attribute__((always_inline)) inline void store16(uint16_t* p, const V16& v) {
  cpu::store16(p, v.lo, v.hi);
}
// geom::pool_greater per lane (v > best, or v NaN and best not), and the select on it.
__attribute__((always_inline)) inline I8 greater(V8 v, V8 best) {
  return (v > best) | ((v != v) & (best == best));
}
__attribute__((always_inline)) inline I16 greater(const V16& v, const V16& best) {
  return {greater(v.lo, best.lo), greater(v.hi, best.hi)};
}
__attribute__((always_inline)) inline V16 blend(const I16& m, const V16& a, const V16& b) {
  return {m.lo ? a.lo : b.lo, m.hi ? a.hi : b.hi};
}
__attribute__((always_inline)) inline I16 blend(const I16& m, I8 a, const I16& b) {
  return {m.lo ? a : b.lo, m.hi ? a : b.hi};
}

// The window taps of output (oh, ow) inside the input: rows [kh0, kh1), columns [kw0, kw1).
struct Taps {
  int64_t sh, sw, kh0, kh1, kw0, kw1;
  // The input position (row-major in the plane) of tap (kh, kw).
  int64_t at(const WindowGeom& g, int64_t kh, int64_t kw) const {
    return (sh + kh * g.d[1]) * g.in[2] + sw + kw * g.d[2];
  }
  // AveragePool's divisor of this window, the plain kernel's (the padded leading axis starts at 0).
  double divisor(const WindowGeom& g, bool include_pad) const {
    const int64_t st[3] = {0, sh, sw};
    return geom::avg_pool_divisor(g, st, include_pad);
  }
};
inline Taps taps(const WindowGeom& g, int64_t oh, int64_t ow) {
  Taps t{oh * g.s[1] - g.p[1], ow * g.s[2] - g.p[2], 0, 0, 0, 0};
  geom::window_taps(t.sh, g.k[1], g.d[1], 0, g.in[1], t.kh0, t.kh1);
  geom::window_taps(t.sw, g.k[2], g.d[2], 0, g.in[2], t.kw0, t.kw1);
  return t;
}

// Blocks [b0, b1) of N * C/16: each output position's 16 maxima.
template <class St>
CB_CPU_CLONES void max_pool_blocks(const WindowGeom& g, const St* x, St* y, int64_t b0,
                                   int64_t b1) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  for (int64_t b = b0; b < b1; ++b) {
    const St* xp = x + b * H * W * kL;
    St* yp = y + b * OH * OW * kL;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Taps t = taps(g, oh, ow);
        const V8 low = V8{} + std::numeric_limits<float>::lowest();
        V16 best{low, low};
        for (int64_t kh = t.kh0; kh < t.kh1; ++kh)
          for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
            const V16 v = load16(xp + t.at(g, kh, kw) * kL);
            best = blend(greater(v, best), v, best);
          }
        store16(yp + (oh * OW + ow) * kL, best);
      }
  }
}

// Blocks [b0, b1): each window's first maximum per channel found again (as the index variant of
// the plain row loop: the first tap is taken whatever it holds), dY routed to it in output order
// into an f32 plane, a tap's 16 lanes at a time, then the plane stored.
template <class St>
CB_CPU_CLONES void max_pool_grad_blocks(const WindowGeom& g, const St* x, const St* dy, St* dx,
                                        int64_t b0, int64_t b1) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  float* acc = scratch<float, 0>(H * W * kL);
  for (int64_t b = b0; b < b1; ++b) {
    const St* xp = x + b * H * W * kL;
    const St* dyp = dy + b * OH * OW * kL;
    std::fill(acc, acc + H * W * kL, 0.0f);
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Taps t = taps(g, oh, ow);
        if (t.kh0 >= t.kh1 || t.kw0 >= t.kw1) continue;  // wholly in padding: nothing back
        const int32_t first = static_cast<int32_t>(t.at(g, t.kh0, t.kw0));
        V16 best = load16(xp + int64_t{first} * kL);
        I16 at{I8{} + first, I8{} + first};
        for (int64_t kh = t.kh0; kh < t.kh1; ++kh)
          for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
            const int32_t q = static_cast<int32_t>(t.at(g, kh, kw));
            const V16 v = load16(xp + int64_t{q} * kL);
            const I16 take = greater(v, best);
            best = blend(take, v, best);
            at = blend(take, I8{} + q, at);
          }
        // dY to each tap its lanes' maxima are at, as vectors (a lane not at the tap adds +0,
        // which changes no sum: acc starts at +0 and so never holds -0).
        const V16 d = load16(dyp + (oh * OW + ow) * kL);
        for (int64_t kh = t.kh0; kh < t.kh1; ++kh)
          for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
            const int32_t q = static_cast<int32_t>(t.at(g, kh, kw));
            float* ap = acc + int64_t{q} * kL;
            const I8 qv = I8{} + q;
            store8(ap, load8(ap) + (at.lo == qv ? d.lo : V8{}));
            store8(ap + 8, load8(ap + 8) + (at.hi == qv ? d.hi : V8{}));
          }
      }
    St* dxp = dx + b * H * W * kL;
    for (int64_t i = 0; i < H * W; ++i) store16(dxp + i * kL, load16(acc + i * kL));
  }
}

// Blocks [b0, b1): each output position's 16 window sums in f32 in window order (kh, kw) from 0,
// divided by the plain kernel's divisor: its bits, lane by lane.
template <class St>
CB_CPU_CLONES void average_pool_blocks(const WindowGeom& g, bool include_pad, const St* x, St* y,
                                       int64_t b0, int64_t b1) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  for (int64_t b = b0; b < b1; ++b) {
    const St* xp = x + b * H * W * kL;
    St* yp = y + b * OH * OW * kL;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Taps t = taps(g, oh, ow);
        V16 sum{V8{}, V8{}};
        for (int64_t kh = t.kh0; kh < t.kh1; ++kh)
          for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
            const V16 v = load16(xp + t.at(g, kh, kw) * kL);
            sum.lo += v.lo;
            sum.hi += v.hi;
          }
        const double div = t.divisor(g, include_pad);
        const float d = static_cast<float>(div);
        store16(yp + (oh * OW + ow) * kL, div > 0 ? V16{sum.lo / d, sum.hi / d} : V16{V8{}, V8{}});
      }
  }
}

// Blocks [b0, b1): dY / divisor added to each window's positions in output order, into dX itself
// (f32: zeroed first, the plain kernel's bits) or an f32 plane stored once (bf16).
template <class St>
CB_CPU_CLONES void average_pool_grad_blocks(const WindowGeom& g, bool include_pad, const St* dy,
                                            St* dx, int64_t b0, int64_t b1) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  constexpr bool direct = std::is_same_v<St, float>;
  float* plane = direct ? nullptr : scratch<float, 0>(H * W * kL);
  for (int64_t b = b0; b < b1; ++b) {
    const St* dyp = dy + b * OH * OW * kL;
    float* acc;
    if constexpr (direct)
      acc = dx + b * H * W * kL;
    else
      acc = plane;
    std::fill(acc, acc + H * W * kL, 0.0f);
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Taps t = taps(g, oh, ow);
        const double div = t.divisor(g, include_pad);
        if (div <= 0 || t.kh0 >= t.kh1 || t.kw0 >= t.kw1) continue;
        const float d = static_cast<float>(div);
        const V16 g16 = load16(dyp + (oh * OW + ow) * kL);
        const V16 v{g16.lo / d, g16.hi / d};
        for (int64_t kh = t.kh0; kh < t.kh1; ++kh)
          for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
            float* q = acc + t.at(g, kh, kw) * kL;
            store16(q, V16{load8(q) + v.lo, load8(q + 8) + v.hi});
          }
      }
    if constexpr (!direct) {
      St* dxp = dx + b * H * W * kL;
      for (int64_t i = 0; i < H * W; ++i) store16(dxp + i * kL, load16(acc + i * kL));
    }
  }
}

// Checks that `vs` are g's blocked 2-D values stored alike, then runs
// f(St* tag, b0, b1) over the N * C/16 blocks on the pool, St their storage (storage.h), each
// block costing about `cost` element operations.
template <class F>
void over_blocks(const WindowGeom& g, std::initializer_list<const TensorView*> vs, int64_t cost,
                 F&& f) {
  CB_CHECK(g.nsp == 2 && g.c % kL == 0);
  const bool bf16 = (*vs.begin())->bf16_storage;
  for (const TensorView* v : vs)
    CB_CHECK(v->blocked && v->dtype == DType::F32 && v->bf16_storage == bf16);
  with_storage(bf16, [&]<class St>(St* tag) {
    parallel(g.n * g.c / kL, cost, [&](int64_t b0, int64_t b1) { f(tag, b0, b1); });
  });
}

}  // namespace

void max_pool_blocked(const WindowGeom& g, const TensorView& X, const TensorView& Y) {
  over_blocks(g, {&X, &Y}, g.out_vol * g.clip_vol * kL, [&]<class St>(St*, int64_t b0, int64_t b1) {
    max_pool_blocks<St>(g, static_cast<const St*>(X.data), static_cast<St*>(Y.data), b0, b1);
  });
}

void max_pool_grad_blocked(const WindowGeom& g, const TensorView& dY, const TensorView& X,
                           const TensorView& dX) {
  CB_CHECK(g.in_vol < (int64_t{1} << 31));  // tap positions as int32 lanes
  over_blocks(g, {&dY, &X, &dX}, (g.out_vol * g.clip_vol + g.in_vol) * kL,
              [&]<class St>(St*, int64_t b0, int64_t b1) {
                max_pool_grad_blocks<St>(g, static_cast<const St*>(X.data),
                                         static_cast<const St*>(dY.data), static_cast<St*>(dX.data),
                                         b0, b1);
              });
}

void average_pool_blocked(const WindowGeom& g, bool include_pad, const TensorView& X,
                          const TensorView& Y) {
  over_blocks(g, {&X, &Y}, g.out_vol * g.clip_vol * kL, [&]<class St>(St*, int64_t b0, int64_t b1) {
    average_pool_blocks<St>(g, include_pad, static_cast<const St*>(X.data),
                            static_cast<St*>(Y.data), b0, b1);
  });
}

void average_pool_grad_blocked(const WindowGeom& g, bool include_pad, const TensorView& dY,
                               const TensorView& dX) {
  over_blocks(g, {&dY, &dX}, (g.out_vol * g.clip_vol + g.in_vol) * kL,
              [&]<class St>(St*, int64_t b0, int64_t b1) {
                average_pool_grad_blocks<St>(g, include_pad, static_cast<const St*>(dY.data),
                                             static_cast<St*>(dX.data), b0, b1);
              });
}

}  // namespace cb::cpu
