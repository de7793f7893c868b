// Pooling on the CPU: MaxPool (f32, f64, i8, u8; optional i64 Indices), AveragePool and
// GlobalAveragePool (f32, f64). X [N,C,D...] -> Y [N,C,D'...], 1-D to 3-D spatial dims padded to
// 3-D (WindowGeom, conv.h); pads, strides, dilations and ceil_mode come resolved from infer().
// Conventions (ONNX, as PyTorch): padding never wins a max; MaxPool Indices are flat offsets into
// X ([0, N*C*D...)), row-major, or column-major over the spatial dims with storage_order=1;
// AveragePool divides by the valid count, or with count_include_pad by the window's positions
// inside the padded input (not the ceil_mode overhang). Windows are clipped to the input by
// arithmetic (geom::window_taps): no loop visits padding, however large the window (kernel_shape
// 2^40 with SAME padding is valid ONNX). Planes [n, c] run across the pool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/max_pool_2x2.h"
#include "kernels/cpu/plane_sum.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {

// Runs body(plane_begin, plane_end) over the N*C planes, in parallel when there is work enough.
template <typename F>
void over_planes(const KernelArgs& a, int64_t planes, int64_t work_per_plane, const F& body) {
  if (current_pool() && planes > 1 && planes * work_per_plane >= 2 * kGrain)
    current_pool()->parallel_for(planes, body);
  else
    body(0, planes);
}

using geom::pool_greater;

// ---- MaxPool ------------------------------------------------------------------------------------
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
// vectorises. ip: this plane's indices or nullptr; base: the plane's offset in X.
template <typename T, bool kIndices>
void max_pool_plane(const WindowGeom& g, const T* xp, T* yp, int64_t* ip, int64_t base,
                    bool col_major) {
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
        for (int64_t ow = 0; ow < O2; ++ow)
          if (ir[ow] < 0) yr[ow] = T(0), ir[ow] = base;  // a window wholly in padding
    }
}

// The same results one window at a time, each clipped to the input (for_each_in_window): the
// maximum starts at `lowest`, or with indices at the window's first element, as in the row loop.
template <typename T, bool kIndices>
void max_pool_windows(const WindowGeom& g, const T* xp, T* yp, int64_t* ip, int64_t base,
                      bool col_major) {
  for (int64_t o = 0; o < g.out_vol; ++o) {
    int64_t st[3], at = -1;
    geom::window_start(g, o, st);
    T best = std::numeric_limits<T>::lowest();
    geom::for_each_in_window(g, st, [&](int64_t q) {
      const T v = xp[q];
      if ((kIndices && at < 0) || pool_greater(v, best)) best = v, at = q;
    });
    yp[o] = best;
    if constexpr (kIndices) {
      if (at < 0) {  // a window wholly in padding
        yp[o] = T(0);
        ip[o] = base;
      } else if (!col_major) {
        ip[o] = base + at;
      } else {
        const int64_t iw = at % g.in[2], ih = (at / g.in[2]) % g.in[1],
                      id = at / (g.in[2] * g.in[1]);
        ip[o] = base + id + (ih + iw * g.in[1]) * g.in[0];
      }
    }
  }
}

template <typename T>
void max_pool(const KernelArgs& a) {
  const auto& p = a.p<ops::PoolParams>();
  const TensorView &X = a.in[0], &Y = a.out[0];
  const TensorView* I = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  const WindowGeom g = window_geom("pooling", p.window, X.dims, Y.dims, 1);
  const T* x = X.ptr<T>();
  T* y = Y.ptr<T>();
  int64_t* ind = I ? I->ptr<int64_t>() : nullptr;
  if (!ind && is_max_pool_2x2(g)) {
    over_planes(a, g.n * g.c, 4 * g.out_vol, [&](int64_t c0, int64_t c1) {
      max_pool_2x2(x, y, g.n * g.c, c0, c1, g.in[1], g.in[2], g.out[1], g.out[2]);
    });
    return;
  }
  const bool rows = rows_pay(g);
  auto body = [&](int64_t c0, int64_t c1) {
    for (int64_t pc = c0; pc < c1; ++pc) {
      const T* xp = x + pc * g.in_vol;
      T* yp = y + pc * g.out_vol;
      const bool col = p.storage_order == 1;
      if (ind && rows)
        max_pool_plane<T, true>(g, xp, yp, ind + pc * g.out_vol, pc * g.in_vol, col);
      else if (ind)
        max_pool_windows<T, true>(g, xp, yp, ind + pc * g.out_vol, pc * g.in_vol, col);
      else if (rows)
        max_pool_plane<T, false>(g, xp, yp, nullptr, 0, false);
      else
        max_pool_windows<T, false>(g, xp, yp, nullptr, 0, false);
    }
  };
  over_planes(a, g.n * g.c, g.out_vol * g.clip_vol, body);
}

// ---- AveragePool --------------------------------------------------------------------------------
template <typename T>
void average_pool(const KernelArgs& a) {
  const auto& p = a.p<ops::PoolParams>();
  const TensorView &X = a.in[0], &Y = a.out[0];
  const WindowGeom g = window_geom("pooling", p.window, X.dims, Y.dims, 1);
  const T* x = X.ptr<T>();
  T* y = Y.ptr<T>();
  auto body = [&](int64_t c0, int64_t c1) {
    for (int64_t pc = c0; pc < c1; ++pc) {
      const T* xp = x + pc * g.in_vol;
      T* yp = y + pc * g.out_vol;
      int64_t o = 0;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
            const int64_t st[3] = {od * g.s[0] - g.p[0], oh * g.s[1] - g.p[1],
                                   ow * g.s[2] - g.p[2]};
            T sum = 0;
            geom::for_each_in_window(g, st, [&](int64_t q) { sum += xp[q]; });
            const double div = geom::avg_pool_divisor(g, st, p.count_include_pad);
            yp[o] = div > 0 ? sum / static_cast<T>(div) : T(0);
          }
    }
  };
  over_planes(a, g.n * g.c, g.out_vol * g.clip_vol, body);
}

// ---- GlobalAveragePool: [N,C,D...] -> [N,C,1...] -----------------------------------------------
// y[pc] = mean of plane pc of x [planes, vol], planes [c0, c1).
template <typename T>
CB_CPU_CLONES void plane_means(const T* x, T* y, int64_t vol, int64_t c0, int64_t c1) {
  for (int64_t pc = c0; pc < c1; ++pc)
    y[pc] = vol ? static_cast<T>(plane_sum(x + pc * vol, vol) / static_cast<double>(vol)) : T(0);
}

template <typename T>
void global_average_pool(const KernelArgs& a) {
  const TensorView &X = a.in[0], &Y = a.out[0];
  int64_t planes = X.dims[0] * X.dims[1], vol = planes ? X.numel() / planes : 0;
  const T* x = X.ptr<T>();
  T* y = Y.ptr<T>();
  over_planes(a, planes, vol, [&](int64_t c0, int64_t c1) { plane_means(x, y, vol, c0, c1); });
}

}  // namespace

void MaxPool(const KernelArgs& a) {
  switch (kernel_dtype(a)) {
    case DType::F64:
      return max_pool<double>(a);
    case DType::I8:
      return max_pool<int8_t>(a);
    case DType::U8:
      return max_pool<uint8_t>(a);
    default:
      return max_pool<float>(a);
  }
}

void AveragePool(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    average_pool<double>(a);
  else
    average_pool<float>(a);
}

void GlobalAveragePool(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    global_average_pool<double>(a);
  else
    global_average_pool<float>(a);
}

}  // namespace cb::cpu
