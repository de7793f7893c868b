// Conv on the CPU: X [N,C,D...] (*) W [M,C/G,k...] (+ B [M]) -> Y [N,M,D'...], 1-D to 3-D.
// Spatial dims are padded to 3-D with leading unit dims, so one code path serves every rank.
// Per (sample n, group g): im2col X_ng [C/G,D...] -> col [C/G*kvol, P] (P = output volume), then
//   Y_ng [M/G, P] = W_g [M/G, C/G*kvol] x col [C/G*kvol, P]   (one single-threaded BLAS GEMM);
// pointwise convs (1x1, stride 1, no pad) use X_ng as col directly; depthwise convs (C/G = 1)
// accumulate directly, row by row. The (n, g) tasks run across the pool; col lives in a
// per-thread scratch buffer that grows once. Pads come resolved from ConvParams (conv infer()).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/current_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {

// x [Cg, I0,I1,I2] -> col [Cg*k0*k1*k2, O0*O1*O2]
template <typename T>
void im2col_t(const WindowGeom& g, const T* x, T* col) {
  const int64_t P = g.out_vol, O1 = g.out[1], O2 = g.out[2];
  T* row = col;
  for (int64_t c = 0; c < g.cg; ++c) {
    const T* xc = x + c * g.in_vol;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, row += P) {
          int64_t off = kw * g.d[2] - g.p[2], lo, hi;
          valid_range(off, g.s[2], g.in[2], O2, lo, hi);
          for (int64_t od = 0; od < g.out[0]; ++od) {
            int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            for (int64_t oh = 0; oh < O1; ++oh) {
              int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              T* r = row + (od * O1 + oh) * O2;
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                std::fill(r, r + O2, T(0));
                continue;
              }
              const T* xr = xc + (id * g.in[1] + ih) * g.in[2] + off;
              std::fill(r, r + lo, T(0));
              if (g.s[2] == 1)
                std::copy(xr + lo, xr + hi, r + lo);
              else
                for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * g.s[2]];
              std::fill(r + hi, r + O2, T(0));
            }
          }
        }
  }
}

// Depthwise (one input channel per group): y [Mg, P] = sum over the window of w * x, accumulated
// one output row at a time; x [I0,I1,I2], w [Mg, kvol].
template <typename T>
void depthwise(const WindowGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t O1 = g.out[1], O2 = g.out[2];
  for (int64_t m = 0; m < g.mg; ++m) {
    T* ym = y + m * g.out_vol;
    std::fill(ym, ym + g.out_vol, bias ? bias[m] : T(0));
    const T* wm = w + m * g.k_vol;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          T wv = wm[(kd * g.k[1] + kh) * g.k[2] + kw];
          int64_t off = kw * g.d[2] - g.p[2], lo, hi;
          valid_range(off, g.s[2], g.in[2], O2, lo, hi);
          for (int64_t od = 0; od < g.out[0]; ++od) {
            int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < O1; ++oh) {
              int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              if (ih < 0 || ih >= g.in[1]) continue;
              const T* xr = x + (id * g.in[1] + ih) * g.in[2] + off;
              T* r = ym + (od * O1 + oh) * O2;
              if (g.s[2] == 1)
                for (int64_t ow = lo; ow < hi; ++ow) r[ow] += wv * xr[ow];
              else
                for (int64_t ow = lo; ow < hi; ++ow) r[ow] += wv * xr[ow * g.s[2]];
            }
          }
        }
  }
}

template <typename T>
void conv_typed(const KernelArgs& a) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const T* bias = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<T>() : nullptr;
  WindowGeom g = window_geom("Conv", p.window, X.dims, Y.dims, p.group);
  const T *x = X.ptr<T>(), *w = W.ptr<T>();
  T* y = Y.ptr<T>();
  const int64_t kc = g.cg * g.k_vol, P = g.out_vol;
  if (g.n == 0 || g.m == 0 || P == 0) return;
  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t n = t / g.groups, gi = t % g.groups;
      const T* x_ng = x + (n * g.c + gi * g.cg) * g.in_vol;
      const T* w_g = w + gi * g.mg * kc;
      const T* b_g = bias ? bias + gi * g.mg : nullptr;
      T* y_ng = y + (n * g.m + gi * g.mg) * P;
      if (g.cg == 1 && g.groups > 1) {
        depthwise(g, x_ng, w_g, b_g, y_ng);
        continue;
      }
      const T* col = x_ng;
      if (!g.pointwise) {
        T* buf = scratch<T>(kc * P);
        im2col_t(g, x_ng, buf);
        col = buf;
      }
      // [Mg, Cg*kvol] x [Cg*kvol, P] -> [Mg, P]
      gemm(false, false, g.mg, P, kc, T(1), w_g, kc, col, P, T(0), y_ng, P);
      if (b_g)
        for (int64_t m = 0; m < g.mg; ++m) {
          T* r = y_ng + m * P;
          for (int64_t i = 0; i < P; ++i) r[i] += b_g[m];
        }
    }
  };
  int64_t tasks = g.n * g.groups;
  if (current_pool() && tasks > 1 && g.mg * kc * P * tasks >= (int64_t{1} << 16))
    current_pool()->parallel_for(tasks, task);
  else
    task(0, tasks);
}

}  // namespace

void im2col(const WindowGeom& g, const float* x, float* col) { im2col_t(g, x, col); }
void im2col(const WindowGeom& g, const double* x, double* col) { im2col_t(g, x, col); }

void conv_im2col(const KernelArgs& a) {
  if (kernel_dtype(a) == DType::F64)
    conv_typed<double>(a);
  else
    conv_typed<float>(a);
}

void Conv(const KernelArgs& a) {
  if (a.in[0].blocked || a.out[0].blocked) {
    // Only oneDNN reads and writes the blocked layout (assign_blocked_layouts puts it only where
    // oneDNN runs the conv).
    if (!conv_dnnl(a))
      throw InternalError("Conv: oneDNN has no implementation for a blocked-layout conv");
    return;
  }
  if (!conv_c1(a) && !conv_dnnl(a)) conv_im2col(a);
}

ConvKey conv_key(const ops::ConvParams& p, const std::vector<int64_t>& x_dims, int64_t out_channels,
                 int64_t samples, int64_t flags) {
  const size_t r = x_dims.size() - 2;
  ConvKey key{};
  size_t k = 0;
  key[k++] = samples;
  key[k++] = p.group;
  key[k++] = flags;
  for (int64_t d : x_dims) key[k++] = d;  // the batch dim too: harmless, N is fixed per node
  key[k++] = out_channels;
  for (size_t i = 0; i < r; ++i) {
    key[k++] = p.window.kernel_shape[i];
    key[k++] = p.window.strides[i];
    key[k++] = p.window.dilations[i];
    key[k++] = p.window.pads[i] * 4096 + p.window.pads[i + r];
  }
  return key;
}

}  // namespace cb::cpu
