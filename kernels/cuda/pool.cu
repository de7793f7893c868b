// Pooling kernels of the CUDA backend, mirroring the CPU backend's (kernels/cpu/pool.cpp,
// pool_grad.cpp): same attributes, dtypes and rules, on the window geometry of
// kernels/common/geometry.h. One thread per output (forwards); the gradients are gathers over input
// positions (each sums the windows covering it in ascending output order, as the CPU's += does), so
// no atomics and no zero fill. MaxPoolGrad first records each window's argmax (workspace) with the
// forward's rule: window order (kd, kh, kw), the first maximum wins, NaN wins, padding never wins.
// Windows are clipped to the input by arithmetic (geom::window_taps, for_each_in_window): a thread
// never walks padding, however large the window (kernel_shape 2^40 with SAME padding is valid).
#include <limits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- pooling geometry (geom::WindowGeom; planes: N*C) ------------------------------------------
using geom::covering;
using geom::covers;
using geom::pool_greater;
using geom::window_start;
using PoolGeom = geom::WindowGeom;

PoolGeom pool_geom(const char* op, const ops::WindowAttrs& w, const std::vector<int64_t>& x,
                   const std::vector<int64_t>& y) {
  return geom::window_geom(op, w, x, y, 1);
}

// The CPU's 2x2/stride-2 fast path (max_pool_2x2.h), whose maximum starts from the first element.
bool is_max_pool_2x2(const PoolGeom& g) {
  return g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 && g.k[1] == 2 && g.k[2] == 2 &&
         g.s[1] == 2 && g.s[2] == 2 && g.d[1] == 1 && g.d[2] == 1 && g.p[1] == 0 && g.p[2] == 0 &&
         2 * g.out[1] <= g.in[1] && 2 * g.out[2] <= g.in[2];
}

// The plane-local offset of window o's maximum in plane xp (first maximum in window order), or
// -1 for a window wholly in padding. first_takes: the first valid element starts the maximum
// (else it starts at `lowest`, as the CPU's no-indices path; they differ only for -inf).
template <class T>
CB_HOST_DEVICE inline int64_t window_argmax(const PoolGeom& g, const T* xp, int64_t o,
                                            bool first_takes, T lowest, T& best) {
  int64_t st[3];
  window_start(g, o, st);
  int64_t at = -1;
  best = lowest;
  geom::for_each_in_window(g, st, [&](int64_t q) {
    const T v = xp[q];
    if ((first_takes && at < 0) || pool_greater(v, best)) {
      best = v;
      at = q;
    }
  });
  return at;
}

// ---- MaxPool ------------------------------------------------------------------------------------
template <class T>
void max_pool(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PoolParams>();
  const PoolGeom g = pool_geom("MaxPool", p.window, a.in[0].dims, a.out[0].dims);
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  int64_t* ind = out_ptr<int64_t>(a, 1);
  const bool col_major = p.storage_order == 1;
  const bool first_takes = ind || is_max_pool_2x2(g);
  const T lowest = std::numeric_limits<T>::lowest();
  parallel_for(c, (g.n * g.c) * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.out_vol, o = i % g.out_vol;
    T best;
    const int64_t at = window_argmax(g, x + pc * g.in_vol, o, first_takes, lowest, best);
    if (!ind) {
      y[i] = best;
      return;
    }
    const int64_t base = pc * g.in_vol;
    if (at < 0) {  // a window wholly in padding
      y[i] = T(0);
      ind[i] = base;
      return;
    }
    y[i] = best;
    if (!col_major) {
      ind[i] = base + at;
    } else {
      const int64_t iw = at % g.in[2], ih = (at / g.in[2]) % g.in[1], id = at / (g.in[2] * g.in[1]);
      ind[i] = base + id + (ih + iw * g.in[1]) * g.in[0];
    }
  });
}

// ---- AveragePool --------------------------------------------------------------------------------
template <class T>
void average_pool(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PoolParams>();
  const PoolGeom g = pool_geom("AveragePool", p.window, a.in[0].dims, a.out[0].dims);
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  const bool include_pad = p.count_include_pad;
  parallel_for(c, (g.n * g.c) * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.out_vol, o = i % g.out_vol;
    const T* xp = x + pc * g.in_vol;
    int64_t st[3];
    window_start(g, o, st);
    T sum = 0;
    geom::for_each_in_window(g, st, [&](int64_t q) { sum += xp[q]; });
    const double div = geom::avg_pool_divisor(g, st, include_pad);
    y[i] = div > 0 ? sum / static_cast<T>(div) : T(0);
  });
}

// ---- GlobalAveragePool --------------------------------------------------------------------------
template <class T>
void global_average_pool(const KernelArgs& a, const GpuCtx& c) {
  const TensorView& X = a.in[0];
  const int64_t planes = X.dims[0] * X.dims[1], vol = planes ? X.numel() / planes : 0;
  const T* x = X.ptr<T>();
  T* y = a.out[0].ptr<T>();
  segmented_reduce(
      c, planes, vol, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return static_cast<double>(x[o * vol + j]);
      },
      AddD{},
      [=] CB_HOST_DEVICE(int64_t o, double acc) {
        y[o] = vol ? static_cast<T>(acc / static_cast<double>(vol)) : T(0);
      });
}

// ---- MaxPoolGrad --------------------------------------------------------------------------------
// Workspace: each window's argmax, plane-local (int64 [N*C*out_vol]).
size_t max_pool_grad_workspace(const KernelArgs& a, const GpuCtx&) {
  return static_cast<size_t>(a.in[0].numel()) * sizeof(int64_t);
}

template <class T>
void max_pool_grad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PoolParams>();
  const PoolGeom g = pool_geom("MaxPoolGrad", p.window, a.in[1].dims, a.in[0].dims);
  const T *dy = a.in[0].ptr<T>(), *x = a.in[1].ptr<T>();
  T* dx = a.out[0].ptr<T>();
  int64_t* arg = workspace_of<int64_t>(a, c, &max_pool_grad_workspace, "MaxPoolGrad");
  parallel_for(c, (g.n * g.c) * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.out_vol;
    T best;
    arg[i] = window_argmax(g, x + pc * g.in_vol, i % g.out_vol, true, T(0), best);
  });
  // dx at input position q: the sum of dy over the windows whose argmax is q, in output order.
  parallel_for(c, (g.n * g.c) * g.in_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.in_vol, q = i % g.in_vol;
    const int64_t iw = q % g.in[2], ih = (q / g.in[2]) % g.in[1], id = q / (g.in[2] * g.in[1]);
    const int64_t* ap = arg + pc * g.out_vol;
    const T* dyp = dy + pc * g.out_vol;
    int64_t lo[3], hi[3];
    covering(g, 0, id, lo[0], hi[0]);
    covering(g, 1, ih, lo[1], hi[1]);
    covering(g, 2, iw, lo[2], hi[2]);
    T sum = T(0);
    for (int64_t od = lo[0]; od < hi[0]; ++od) {
      if (!covers(g, 0, id, od)) continue;
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        if (!covers(g, 1, ih, oh)) continue;
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
          if (!covers(g, 2, iw, ow)) continue;
          const int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
          if (ap[o] == q) sum += dyp[o];
        }
      }
    }
    dx[i] = sum;
  });
}

// ---- AveragePoolGrad ----------------------------------------------------------------------------
template <class T>
void average_pool_grad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PoolParams>();
  // in 1 is dX's dims
  const PoolGeom g = pool_geom("AveragePoolGrad", p.window, a.out[0].dims, a.in[0].dims);
  const T* dy = a.in[0].ptr<T>();
  T* dx = a.out[0].ptr<T>();
  const bool include_pad = p.count_include_pad;
  // dx at input position q: the sum over the windows covering it (in output order) of
  // dy / divisor, the forward's divisor.
  parallel_for(c, (g.n * g.c) * g.in_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.in_vol, q = i % g.in_vol;
    const int64_t at[3] = {q / (g.in[2] * g.in[1]), (q / g.in[2]) % g.in[1], q % g.in[2]};
    const T* dyp = dy + pc * g.out_vol;
    int64_t lo[3], hi[3];
    for (int ax = 0; ax < 3; ++ax) covering(g, ax, at[ax], lo[ax], hi[ax]);
    // The divisor's factor along axis ax for output o (separable: a product over the axes).
    auto factor = [&](int ax, int64_t o) {
      return geom::avg_pool_factor(g, ax, o * g.s[ax] - g.p[ax], include_pad);
    };
    T sum = T(0);
    for (int64_t od = lo[0]; od < hi[0]; ++od) {
      if (!covers(g, 0, at[0], od)) continue;
      const double fd = static_cast<double>(factor(0, od));
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        if (!covers(g, 1, at[1], oh)) continue;
        const double fh = fd * static_cast<double>(factor(1, oh));
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
          if (!covers(g, 2, at[2], ow)) continue;
          const double div = fh * static_cast<double>(factor(2, ow));
          if (div <= 0) continue;
          sum += dyp[(od * g.out[1] + oh) * g.out[2] + ow] / static_cast<T>(div);
        }
      }
    }
    dx[i] = sum;
  });
}

// ---- dispatch -----------------------------------------------------------------------------------
void MaxPool(const KernelArgs& a, const GpuCtx& c) {
  switch (kernel_dtype(a)) {
    case DType::I8:
      return max_pool<int8_t>(a, c);
    case DType::U8:
      return max_pool<uint8_t>(a, c);
    default:
      CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "MaxPool", max_pool, a, c)
  }
}
void MaxPoolGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "MaxPoolGrad", max_pool_grad, a, c)
}
void AveragePool(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "AveragePool", average_pool, a, c)
}
void AveragePoolGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "AveragePoolGrad", average_pool_grad, a, c)
}
void GlobalAveragePool(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "GlobalAveragePool", global_average_pool, a, c)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::AveragePool, &AveragePool, kFloat},
    {OpKind::AveragePoolGrad, &AveragePoolGrad, kFloat},
    {OpKind::GlobalAveragePool, &GlobalAveragePool, kFloat},
    {OpKind::MaxPool, &MaxPool, kFloat | type_bit(DType::I8) | type_bit(DType::U8)},
    {OpKind::MaxPoolGrad, &MaxPoolGrad, kFloat, &max_pool_grad_workspace},
};

}  // namespace

std::span<const GpuKernel> pool_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
