// ConvGrad on the CPU: the backward of Conv (conv.cpp), 1-D to 3-D through the same 3-D-padded
// geometry (WindowGeom), groups, depthwise, strides, asymmetric pads, dilations.
//   ConvGrad(dY [N,M,D'...], X [N,C,D...], W [M,C/G,k...]) -> dX [N,C,D...]?, dW [M,C/G,k...]?,
//                                                              dB [M]?
// Any output may be absent (the vjp omits those not needed, e.g. dX of the first layer); every
// present one is assigned (=), never accumulated into.
// Per (sample n, group g), with P the output volume and kc = C/G * kvol:
//   col = im2col(X_ng) [kc, P];   dW_g [M/G, kc] += dY_ng [M/G, P] x col^T
//   dcol [kc, P] = W_g^T [kc, M/G] x dY_ng [M/G, P];   dX_ng = col2im(dcol), im2col's adjoint
// pointwise convs use X_ng as col and write dX_ng = W_g^T x dY_ng directly; depthwise convs
// (C/G = 1) loop directly, as the forward does. dB[m] = sum of dY over N and the spatial dims.
// f32 tries the single-input-channel direct loops first (dW only, conv_c1.cpp), then oneDNN
// (conv_grad_dnnl.cpp; 2.5-3x faster on ResNet-20 in tools/bench/conv_bench.cpp); f64 is always
// im2col. Blocked values: the depthwise 3x3 kernel (conv_depthwise.cpp), the bf16 pointwise
// weight gradient (conv_pointwise.cpp, dX then from oneDNN), else oneDNN. Parallelism: the batch is
// cut into `parts` chunks, each task is a (group, chunk) pair; chunk t accumulates its dW in
// partial t (partial 0 is dW itself, the others the calling thread's scratch), summed at the end.
// BLAS runs single-threaded inside each task.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/plane_sum.h"
#include "kernels/cpu/storage.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {

// dcol [Cg*kvol, P] accumulated (+=) into x [Cg, I0,I1,I2]: the transpose of im2col.
template <typename T>
void col2im(const WindowGeom& g, const T* col, T* x) {
  const int64_t P = g.out_vol, O1 = g.out[1], O2 = g.out[2], s2 = g.s[2];
  const T* row = col;
  for (int64_t c = 0; c < g.cg; ++c) {
    T* xc = x + c * g.in_vol;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, row += P) {
          int64_t off = kw * g.d[2] - g.p[2], lo, hi;
          valid_range(off, s2, g.in[2], O2, lo, hi);
          for (int64_t od = 0; od < g.out[0]; ++od) {
            int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < O1; ++oh) {
              int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              if (ih < 0 || ih >= g.in[1]) continue;
              T* xr = xc + (id * g.in[1] + ih) * g.in[2] + off;  // xr[ow * s2] = x[.., iw]
              const T* r = row + (od * O1 + oh) * O2;
              if (s2 == 1)
                for (int64_t ow = lo; ow < hi; ++ow) xr[ow] += r[ow];
              else
                for (int64_t ow = lo; ow < hi; ++ow) xr[ow * s2] += r[ow];
            }
          }
        }
  }
}

// Depthwise, one sample and group: x, dx [I0,I1,I2]; w, dw [Mg, kvol]; dy [Mg, P].
// dx += sum over m and the window of w * dy (scattered); dw += sum over P of dy * x.
template <typename T>
void depthwise_grad(const WindowGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw) {
  const int64_t O1 = g.out[1], O2 = g.out[2], s2 = g.s[2];
  for (int64_t m = 0; m < g.mg; ++m) {
    const T* dym = dy + m * g.out_vol;
    for (int64_t kd = 0, k = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, ++k) {
          const T wv = w[m * g.k_vol + k];
          int64_t off = kw * g.d[2] - g.p[2], lo, hi;
          valid_range(off, s2, g.in[2], O2, lo, hi);
          T acc = 0;
          for (int64_t od = 0; od < g.out[0]; ++od) {
            int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            if (id < 0 || id >= g.in[0]) continue;
            for (int64_t oh = 0; oh < O1; ++oh) {
              int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              if (ih < 0 || ih >= g.in[1]) continue;
              const int64_t at = (id * g.in[1] + ih) * g.in[2] + off;
              const T* r = dym + (od * O1 + oh) * O2;
              if (dw)
                for (int64_t ow = lo; ow < hi; ++ow) acc += r[ow] * x[at + ow * s2];
              if (dx)
                for (int64_t ow = lo; ow < hi; ++ow) dx[at + ow * s2] += wv * r[ow];
            }
          }
          if (dw) dw[m * g.k_vol + k] += acc;
        }
  }
}

template <typename T>
void conv_grad_typed(const KernelArgs& a) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const TensorView* dX = a.out[0].present() ? &a.out[0] : nullptr;
  const TensorView* dW = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  if (!dX && !dW) return;
  const WindowGeom g = window_geom("ConvGrad", p.window, X.dims, dY.dims, p.group);
  const T *x = X.ptr<T>(), *w = W.ptr<T>(), *dy = dY.ptr<T>();
  T* dx = dX ? dX->ptr<T>() : nullptr;
  const int64_t kc = g.cg * g.k_vol, P = g.out_vol, w_size = g.m * kc;
  if (g.n == 0 || g.m == 0 || P == 0) {  // nothing flows back
    if (dx) std::fill(dx, dx + X.numel(), T(0));
    if (dW) std::fill(dW->ptr<T>(), dW->ptr<T>() + w_size, T(0));
    return;
  }
  const bool depthwise = g.cg == 1 && g.groups > 1;
  const int threads = current_pool() ? current_pool()->size() : 1;
  const bool split = threads > 1 && g.mg * kc * P * g.n * g.groups >= (int64_t{1} << 16);
  // Chunks of the batch; each has its own dW partial [M, kc] unless it is chunk 0.
  const int64_t want = split ? std::min<int64_t>(threads, g.n) : 1;
  const int64_t chunk = (g.n + want - 1) / want, parts = (g.n + chunk - 1) / chunk;  // none empty
  T* partials = dW && parts > 1 ? scratch<T, 7>((parts - 1) * w_size) : nullptr;
  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t gi = t % g.groups, part = t / g.groups;
      const int64_t n0 = part * chunk, n1 = std::min(g.n, n0 + chunk);
      const T* w_g = w + gi * g.mg * kc;
      T* dw_g = !dW ? nullptr
                    : (part == 0 ? dW->ptr<T>() : partials + (part - 1) * w_size) + gi * g.mg * kc;
      if (dw_g && depthwise) std::fill(dw_g, dw_g + g.mg * kc, T(0));
      for (int64_t n = n0; n < n1; ++n) {
        const T* x_ng = x + (n * g.c + gi * g.cg) * g.in_vol;
        const T* dy_ng = dy + (n * g.m + gi * g.mg) * P;
        T* dx_ng = dx ? dx + (n * g.c + gi * g.cg) * g.in_vol : nullptr;
        if (depthwise) {
          if (dx_ng) std::fill(dx_ng, dx_ng + g.in_vol, T(0));
          depthwise_grad(g, x_ng, w_g, dy_ng, dx_ng, dw_g);
          continue;
        }
        if (dw_g) {  // [Mg, P] x [P, kc] -> [Mg, kc], the first sample assigns
          const T* col = x_ng;
          if (!g.pointwise) {
            T* buf = scratch<T, 0>(kc * P);
            im2col(g, x_ng, buf);
            col = buf;
          }
          gemm(false, true, g.mg, kc, P, T(1), dy_ng, P, col, P, T(n == n0 ? 0 : 1), dw_g, kc);
        }
        if (!dx_ng) continue;
        if (g.pointwise) {  // [Cg, Mg] x [Mg, P] -> [Cg, P]
          gemm(true, false, kc, P, g.mg, T(1), w_g, kc, dy_ng, P, T(0), dx_ng, P);
          continue;
        }
        T* dcol = scratch<T, 1>(kc * P);  // [kc, Mg] x [Mg, P] -> [kc, P]
        gemm(true, false, kc, P, g.mg, T(1), w_g, kc, dy_ng, P, T(0), dcol, P);
        std::fill(dx_ng, dx_ng + g.cg * g.in_vol, T(0));
        col2im(g, dcol, dx_ng);
      }
    }
  };
  const int64_t tasks = parts * g.groups;
  if (split && tasks > 1)
    current_pool()->parallel_for(tasks, task);
  else
    task(0, tasks);
  if (partials) add_partials(a, dW->ptr<T>(), partials, parts - 1, w_size);
}

// db[c] for channels [m0, m1) of dy [N, M, vol].
template <typename T>
CB_CPU_CLONES void channel_sums(const T* dy, T* db, int64_t n, int64_t m, int64_t vol, int64_t m0,
                                int64_t m1) {
  for (int64_t c = m0; c < m1; ++c) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += plane_sum(dy + (i * m + c) * vol, vol);
    db[c] = static_cast<T>(s);
  }
}

// dB[m] = sum over n and P of dY[n, m, P].
template <typename T>
void bias_grad(const KernelArgs& a) {
  const TensorView &dY = a.in[0], &dB = a.out[2];
  const int64_t n = dY.dims[0], m = dY.dims[1];
  const int64_t vol = n * m != 0 ? dY.numel() / (n * m) : 0;
  const T* dy = dY.ptr<T>();
  T* db = dB.ptr<T>();
  if (dY.blocked) {  // [N, M/16, vol, 16]: a block of 16 channels at a time (storage.h)
    with_storage(dY.bf16_storage, [&](auto* tag) {
      using St = std::remove_pointer_t<decltype(tag)>;
      const auto* d = static_cast<const St*>(dY.data);
      parallel(m / 16, 16 * n * vol, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          double sum[16];
          block_sums(d, n, m / 16, vol, b, sum);
          for (int l = 0; l < 16; ++l) db[b * 16 + l] = static_cast<T>(sum[l]);
        }
      });
    });
    return;
  }
  parallel(m, n * vol, [&](int64_t m0, int64_t m1) { channel_sums(dy, db, n, m, vol, m0, m1); });
}

template <typename T>
void add_partials_t(const KernelArgs& a, T* dst, const T* src, int64_t parts, int64_t n) {
  parallel(n, parts, [&](int64_t i0, int64_t i1) {
    for (int64_t q = 0; q < parts; ++q) {
      const T* s = src + q * n;
      for (int64_t i = i0; i < i1; ++i) dst[i] += s[i];
    }
  });
}

}  // namespace

void add_partials(const KernelArgs& a, float* dst, const float* src, int64_t parts, int64_t n) {
  add_partials_t(a, dst, src, parts, n);
}
void add_partials(const KernelArgs& a, double* dst, const double* src, int64_t parts, int64_t n) {
  add_partials_t(a, dst, src, parts, n);
}

void conv_grad_im2col(const KernelArgs& a) {
  dispatch_float(kernel_dtype(a), [&]<class T>(Tag<T>) { conv_grad_typed<T>(a); });
}

void ConvGrad(const KernelArgs& a) {
  const bool dx = a.out[0].present(), dw = a.out.size() > 1 && a.out[1].present();
  if (a.in[0].blocked || a.in[1].blocked || (dx && a.out[0].blocked)) {
    // Only oneDNN and the depthwise and pointwise kernels read and write the blocked layout
    // (assign_blocked_layouts puts it only where oneDNN runs the conv).
    const bool pointwise_dw = dw && conv_grad_pointwise_weights(a);  // then dX from oneDNN
    if (pointwise_dw ? dx && !conv_grad_dnnl(a, false)
                     : (dx || dw) && !conv_grad_depthwise(a) && !conv_grad_dnnl(a))
      throw InternalError("ConvGrad: oneDNN has no implementation for a blocked-layout conv");
  } else if ((dx || dw) && !conv_grad_c1(a) && !conv_grad_dnnl(a)) {
    conv_grad_im2col(a);
  }
  if (a.out.size() > 2 && a.out[2].present())
    dispatch_float(kernel_dtype(a), [&]<class T>(Tag<T>) { bias_grad<T>(a); });
}

}  // namespace cb::cpu
