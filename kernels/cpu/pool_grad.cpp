// Pooling backward on the CPU (f32, f64), 1-D to 3-D through the 3-D-padded geometry of the
// forward (WindowGeom, conv.h); pads, strides, dilations and ceil_mode come resolved in PoolParams.
//   MaxPoolGrad(dY [N,C,D'...], X [N,C,D...]) -> dX [N,C,D...]
//     each window's maximum is recomputed from X with the forward's rule (pool.cpp: window order
//     kd, kh, kw, the first maximum wins, NaN wins, padding never wins) and gets dy; windows that
//     overlap add up; a window wholly in padding passes nothing back.
//   AveragePoolGrad(dY [N,C,D'...], x_shape [rank]) -> dX [N,C,D...]
//     every valid input position of a window gets dy / divisor, with the forward's divisor: the
//     valid count, or with count_include_pad the window's positions inside the padded input.
// Windows are clipped to the input by arithmetic (geom::window_taps), never walked over padding.
// dX is assigned (zeroed, then accumulated per plane). Planes [n, c] run across the pool.
// MaxPoolGrad finds each row's maxima with MaxPool's vectorised row loop (max_pool_rows.h), then
// routes dY through them in output order (the result of the one-window-at-a-time loop, which is
// kept for windows far wider than the input); 2x2 stride-2 windows have their own fast path.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/max_pool_2x2.h"
#include "kernels/cpu/max_pool_rows.h"
#include "kernels/cpu/pool_blocked.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

// Calls f(o, sd, sh, sw) for every output position o of a plane, with its window's start.
template <typename F>
void each_window(const WindowGeom& g, F&& f) {
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o)
        f(o, od * g.s[0] - g.p[0], oh * g.s[1] - g.p[1], ow * g.s[2] - g.p[2]);
}

// dx [I0,I1,I2] (zeroed) += dy [O0,O1,O2] routed to each window's first maximum in x.
template <typename T>
void max_pool_grad_plane(const WindowGeom& g, const T* x, const T* dy, T* dx) {
  each_window(g, [&](int64_t o, int64_t sd, int64_t sh, int64_t sw) {
    int64_t best_at = -1;
    T best = T(0);
    const int64_t st[3] = {sd, sh, sw};
    geom::for_each_in_window(g, st, [&](int64_t q) {
      const T v = x[q];
      if (best_at < 0 || pool_greater(v, best)) best = v, best_at = q;
    });
    if (best_at >= 0) dx[best_at] += dy[o];
  });
}

// The same, each row's windows at once: the row loop's first-maximum indices (-1: a window wholly
// in padding, which passes nothing back), then dy routed through them in output order.
template <typename T>
void max_pool_grad_rows(const WindowGeom& g, const T* x, const T* dy, T* dx) {
  T* y = scratch<T, 0>(g.out_vol);
  int64_t* at = scratch<int64_t, 1>(g.out_vol);
  max_pool_plane<T, true>(g, x, y, at, 0, false, true);
  for (int64_t o = 0; o < g.out_vol; ++o)
    if (at[o] >= 0) dx[at[o]] += dy[o];
}

// dx [I0,I1,I2] (zeroed) += dy [O0,O1,O2] / divisor over each window's valid positions.
template <typename T>
void average_pool_grad_plane(const WindowGeom& g, bool count_include_pad, const T* dy, T* dx) {
  each_window(g, [&](int64_t o, int64_t sd, int64_t sh, int64_t sw) {
    // The valid window positions along each axis: [lo, hi) steps of the kernel.
    int64_t lo[3], hi[3], start[3] = {sd, sh, sw};
    int64_t valid = 1;
    for (int i = 0; i < 3; ++i) {
      geom::window_taps(start[i], g.k[i], g.d[i], 0, g.in[i], lo[i], hi[i]);
      valid *= hi[i] - lo[i];
    }
    const double div = geom::avg_pool_divisor(g, start, count_include_pad);
    if (div <= 0 || valid <= 0) return;
    const T v = dy[o] / static_cast<T>(div);
    for (int64_t kd = lo[0]; kd < hi[0]; ++kd) {
      const int64_t id = sd + kd * g.d[0];
      for (int64_t kh = lo[1]; kh < hi[1]; ++kh) {
        T* r = dx + (id * g.in[1] + sh + kh * g.d[1]) * g.in[2] + sw;
        for (int64_t kw = lo[2]; kw < hi[2]; ++kw) r[kw * g.d[2]] += v;
      }
    }
  });
}

// Runs plane(pc, dy_plane, dx_plane) over the N*C planes with dX zeroed first.
template <typename T, typename F>
void over_planes(const KernelArgs& a, const WindowGeom& g, F&& plane) {
  const T* dy = a.in[0].ptr<T>();
  T* dx = a.out[0].ptr<T>();
  parallel(g.n * g.c, g.out_vol * g.clip_vol + g.in_vol, [&](int64_t c0, int64_t c1) {
    for (int64_t pc = c0; pc < c1; ++pc) {
      T* dxp = dx + pc * g.in_vol;
      std::fill(dxp, dxp + g.in_vol, T(0));
      plane(pc, dy + pc * g.out_vol, dxp);
    }
  });
}

}  // namespace

void MaxPoolGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::PoolParams>();
  const TensorView &dY = a.in[0], &X = a.in[1];
  const WindowGeom g = window_geom("pooling gradient", p.window, X.dims, dY.dims, 1);
  if (X.blocked) return max_pool_grad_blocked(g, dY, X, a.out[0]);  // assign_blocked_layouts
  const bool fast = is_max_pool_2x2(g);
  dispatch_float(kernel_dtype(a), [&]<class T>(Tag<T>) {
    const T* x = X.ptr<T>();
    if (fast) {
      const T* dy = dY.ptr<T>();
      T* dx = a.out[0].ptr<T>();
      parallel(g.n * g.c, g.in_vol + g.out_vol, [&](int64_t c0, int64_t c1) {
        max_pool_grad_2x2(x, dy, dx, g.n * g.c, c0, c1, g.in[1], g.in[2], g.out[1], g.out[2]);
      });
      return;
    }
    const bool rows = rows_pay(g);
    over_planes<T>(a, g, [&](int64_t pc, const T* dyp, T* dxp) {
      if (rows)
        max_pool_grad_rows(g, x + pc * g.in_vol, dyp, dxp);
      else
        max_pool_grad_plane(g, x + pc * g.in_vol, dyp, dxp);
    });
  });
}

void AveragePoolGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::PoolParams>();
  const TensorView &dY = a.in[0], &dX = a.out[0];  // input 1 (x_shape) is dX's dims
  const WindowGeom g = window_geom("pooling gradient", p.window, dX.dims, dY.dims, 1);
  if (dY.blocked) return average_pool_grad_blocked(g, p.count_include_pad, dY, dX);
  dispatch_float(kernel_dtype(a), [&]<class T>(Tag<T>) {
    over_planes<T>(a, g, [&](int64_t, const T* dyp, T* dxp) {
      average_pool_grad_plane(g, p.count_include_pad, dyp, dxp);
    });
  });
}

}  // namespace cb::cpu
