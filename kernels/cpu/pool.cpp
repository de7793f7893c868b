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
#include "kernels/cpu/max_pool_rows.h"
#include "kernels/cpu/plane_sum.h"
#include "kernels/cpu/pool_blocked.h"
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

// ---- MaxPool ------------------------------------------------------------------------------------
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
  if (a.in[0].blocked) {  // assign_blocked_layouts: X and Y blocked, no indices
    CB_CHECK(a.out.size() < 2 || !a.out[1].present());
    const auto& p = a.p<ops::PoolParams>();
    return max_pool_blocked(window_geom("pooling", p.window, a.in[0].dims, a.out[0].dims, 1),
                            a.in[0], a.out[0]);
  }
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
  if (a.in[0].blocked) {  // assign_blocked_layouts: X and Y blocked
    const auto& p = a.p<ops::PoolParams>();
    return average_pool_blocked(window_geom("pooling", p.window, a.in[0].dims, a.out[0].dims, 1),
                                p.count_include_pad, a.in[0], a.out[0]);
  }
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
