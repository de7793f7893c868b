// MaxPool one output row at a time (max_pool_plane), shared by MaxPool (pool.cpp) and
// MaxPoolGrad (pool_grad.cpp, which takes the row loop's indices and routes dY through them).
// Conventions as pool.cpp's: padding never wins, the first maximum in window order wins, NaN wins.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/kernel_util.h"

namespace cb::cpu {

using geom::pool_greater;

// The window columns kw in [kw0, kw1) that some output of a row reads inside the input: the
// coordinate -p + kw*d must lie in [-(O2-1)*s, in).
inline void row_taps(const WindowGeom& g, int64_t& kw0, int64_t& kw1) {
  const int64_t reach = g.out[2] > 0 ? (g.out[2] - 1) * g.s[2] : 0;
  geom::window_taps(-g.p[2], g.k[2], g.d[2], -reach, g.in[2], kw0, kw1);
}

// Whether max_pool_plane's row loop pays: it walks every column of [kw0, kw1) for each row, which
// for windows far wider than the input at large strides (few outputs, far apart) is mostly
// columns no output reads; one clipped window at a time (max_pool_windows) bounds that work.
inline bool rows_pay(const WindowGeom& g) {
  int64_t kw0, kw1;
  row_taps(g, kw0, kw1);
  return kw1 - kw0 <= 4 * (g.in[2] + g.out[2]);
}

// One plane, one output row at a time: every window position (kd, kh, kw) updates the whole row,
// in window order, so the first maximum wins as in a per-window loop, and the value-only variant
// vectorises. ip: this plane's indices or nullptr; base: the plane's offset in X. A window wholly
// in padding gets y 0 and index `base` (MaxPool's convention), or with keep_empty index -1.
template <typename T, bool kIndices>
void max_pool_plane(const WindowGeom& g, const T* xp, T* yp, int64_t* ip, int64_t base,
                    bool col_major, bool keep_empty = false) {
  const int64_t O1 = g.out[1], O2 = g.out[2], s2 = g.s[2];
  int64_t kw0, kw1;
  row_taps(g, kw0, kw1);
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < O1; ++oh) {
      T* yr = yp + (od * O1 + oh) * O2;
      int64_t* ir = kIndices ? ip + (od * O1 + oh) * O2 : nullptr;
      std::fill(yr, yr + O2, std::numeric_limits<T>::lowest());
      if constexpr (kIndices) std::fill(ir, ir + O2, int64_t{-1});
      const int64_t sd = od * g.s[0] - g.p[0], sh = oh * g.s[1] - g.p[1];
      int64_t kd0, kd1, kh0, kh1;
      geom::window_taps(sd, g.k[0], g.d[0], 0, g.in[0], kd0, kd1);
      geom::window_taps(sh, g.k[1], g.d[1], 0, g.in[1], kh0, kh1);
      for (int64_t kd = kd0; kd < kd1; ++kd) {
        const int64_t id = sd + kd * g.d[0];
        for (int64_t kh = kh0; kh < kh1; ++kh) {
          const int64_t ih = sh + kh * g.d[1];
          for (int64_t kw = kw0; kw < kw1; ++kw) {
            int64_t off = kw * g.d[2] - g.p[2], lo, hi;
            valid_range(off, s2, g.in[2], O2, lo, hi);
            const T* xr = xp + (id * g.in[1] + ih) * g.in[2];  // xr[off + ow * s2] = x[.., iw]
            if constexpr (!kIndices) {
              for (int64_t ow = lo; ow < hi; ++ow) {
                T v = xr[off + ow * s2];
                yr[ow] = pool_greater(v, yr[ow]) ? v : yr[ow];
              }
            } else {
              // The index is affine in ow: pos0 + ow * step (iw = ow * s2 + off).
              const int64_t pos0 = base + (col_major ? id + (ih + off * g.in[1]) * g.in[0]
                                                     : (id * g.in[1] + ih) * g.in[2] + off);
              const int64_t step = col_major ? s2 * g.in[1] * g.in[0] : s2;
              for (int64_t ow = lo; ow < hi; ++ow) {  // branch-free, so it vectorises
                T v = xr[off + ow * s2];
                bool take = ir[ow] < 0 || pool_greater(v, yr[ow]);
                yr[ow] = take ? v : yr[ow];
                ir[ow] = take ? pos0 + ow * step : ir[ow];
              }
            }
          }
        }
      }
      if constexpr (kIndices)
        if (!keep_empty)
          for (int64_t ow = 0; ow < O2; ++ow)
            if (ir[ow] < 0) yr[ow] = T(0), ir[ow] = base;  // a window wholly in padding
    }
}

}  // namespace cb::cpu
