// Conv and ConvGrad's dW for 2-D convolutions of single-channel inputs (the first layer of
// MNIST-style nets: LeNet-5's 1x28x28 -> 6, 5x5, pad 2), f32, stride 1, no dilation, one group.
//   Conv:     X [N,1,H,W] (*) W [M,1,KH,KW] (+ B [M]) -> Y [N,M,OH,OW]
//   ConvGrad: dW [M,1,KH,KW] = sum over n, oh, ow of dY[n,m,oh,ow] * X[n, oh+kh-ph, ow+kw-pw]
//             (only when dX is not asked for: a first layer has no input gradient)
// Direct loops instead of oneDNN: with one input channel oneDNN blocks the M outputs to 16
// channels and pays a reorder of Y (or dY) per call, longer than the convolution itself. Per
// sample the input plane is copied once, zero-padded (rows and columns, so that 32 output columns
// load as two 16-float vectors with no bounds checks); then
//   forward:  for each output row, acc[m][32 columns] += W[m,kh,kw] * xp[oh+kh][kw...]: each input
//             load serves every output channel (M <= 8 per block, accumulators in registers);
//   backward: for each kernel row kh, acc[m][kw] += dYp[m][oh][...] * xs[kw][oh+kh][...] over
//             the output rows (xs: the padded plane's rows shifted by kw, so the loads are aligned;
//             each dY and x vector loaded once per M x KW multiply-adds), in 16-float lanes
//             summed at the end (dY copied with its columns zero-padded to 32).
// The loops use 16-float (AVX-512) vectors and run only where the CPU has AVX-512 (compiled for
// x86-64-v4, chosen at run time); elsewhere, as for other shapes, they return false and Conv and
// ConvGrad take the oneDNN / im2col paths (conv_dnnl.cpp, conv.cpp). Samples are split across
// the pool; backward chunks sum their dW partials (add_partials).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"
#include "runtime/thread_pool.h"

namespace cb::cpu {

namespace {

typedef float F16 __attribute__((vector_size(64)));
constexpr int64_t kV = 16;          // floats per vector
constexpr int64_t kBlock = 2 * kV;  // output columns per register block
constexpr int kMaxM = 8;            // output channels per register block

#define CB_INLINE __attribute__((always_inline)) inline
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CB_AVX512 __attribute__((target("arch=x86-64-v4")))
bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("x86-64-v4");
  return ok;
}
#else
#define CB_AVX512
bool have_avx512() { return false; }
#endif

CB_INLINE void load(F16& v, const float* p) { __builtin_memcpy(&v, p, sizeof(F16)); }
CB_INLINE void store(float* p, const F16& v) { __builtin_memcpy(p, &v, sizeof(F16)); }

// p rounded up to 64 bytes (scratch buffers get kV spare floats for it).
inline float* align64(float* p) {
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
}

bool applies(const WindowGeom& g) {
  return g.c == 1 && g.groups == 1 && g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 && g.s[1] == 1 &&
         g.s[2] == 1 && g.d[1] == 1 && g.d[2] == 1 && g.k[1] <= 16 && g.k[2] <= 16 &&
         g.out[1] > 0 && g.out[2] > 0;
}

// The padded geometry: output columns rounded up to a block, the padded plane's rows and width.
struct Padded {
  int64_t owp, rows, xw;
  explicit Padded(const WindowGeom& g)
      : owp((g.out[2] + kBlock - 1) / kBlock * kBlock),
        rows(g.out[1] + g.k[1] - 1),
        xw(owp + g.k[2] - 1 + kV) {}
};

// dst[c] = src[c] for c in [lo, hi), 0 elsewhere in [0, n): one loop with a select, which
// vectorises (masked loads), where copy + fill around it would be three library calls per row.
CB_INLINE void copy_row(float* dst, const float* src, int64_t lo, int64_t hi, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = c >= lo && c < hi ? src[c] : 0.0f;
}

// xp [rows][xw]: xp[r][c] = x[r - ph][c - pw], 0 outside x.
CB_INLINE void pad_plane(const WindowGeom& g, const Padded& pd, const float* x, float* xp) {
  const int64_t h = g.in[1], w = g.in[2], ph = g.p[1], pw = g.p[2];
  for (int64_t r = 0; r < pd.rows; ++r) {
    const int64_t ih = r - ph;
    const bool inside = ih >= 0 && ih < h;
    copy_row(xp + r * pd.xw, x + (inside ? ih : 0) * w - pw, pw, inside ? pw + w : pw, pd.xw);
  }
}

// Output channels [m0, m0 + MB) of one sample: y [M][OH][OW] from xp.
template <int MB>
CB_INLINE void forward_block(const WindowGeom& g, const Padded& pd, const float* xp, const float* w,
                             const float* bias, int64_t m0, float* y) {
  const int64_t kh_n = g.k[1], kw_n = g.k[2], kvol = kh_n * kw_n;
  const int64_t oh_n = g.out[1], ow_n = g.out[2], plane = oh_n * ow_n;
  const float* wm = w + m0 * kvol;
  for (int64_t oh = 0; oh < oh_n; ++oh)
    for (int64_t cb = 0; cb < pd.owp; cb += kBlock) {
      F16 acc[MB][2];
      for (int m = 0; m < MB; ++m) {
        const float b = bias ? bias[m0 + m] : 0.0f;
        acc[m][0] = F16{} + b;
        acc[m][1] = acc[m][0];
      }
      for (int64_t kh = 0; kh < kh_n; ++kh) {
        const float* row = xp + (oh + kh) * pd.xw + cb;
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          F16 x0, x1;
          load(x0, row + kw);
          load(x1, row + kw + kV);
          for (int m = 0; m < MB; ++m) {
            const float wv = wm[m * kvol + kh * kw_n + kw];
            acc[m][0] += wv * x0;
            acc[m][1] += wv * x1;
          }
        }
      }
      const int64_t cols = std::min(kBlock, ow_n - cb);
      for (int m = 0; m < MB; ++m) {
        float* yr = y + (m0 + m) * plane + oh * ow_n + cb;
        if (cols == kBlock) {
          store(yr, acc[m][0]);
          store(yr + kV, acc[m][1]);
        } else {
          float tmp[kBlock];
          store(tmp, acc[m][0]);
          store(tmp + kV, acc[m][1]);
          std::memcpy(yr, tmp, static_cast<size_t>(cols) * sizeof(float));
        }
      }
    }
}

// Samples [n0, n1): y [N,M,OH,OW].
CB_AVX512 void forward_samples(const WindowGeom& g, const float* x, const float* w,
                               const float* bias, float* y, int64_t n0, int64_t n1) {
  const Padded pd(g);
  float* xp = scratch<float, 8>(pd.rows * pd.xw);
  const int64_t plane_in = g.in[1] * g.in[2], plane_out = g.out[1] * g.out[2];
  for (int64_t n = n0; n < n1; ++n) {
    pad_plane(g, pd, x + n * plane_in, xp);
    float* yn = y + n * g.m * plane_out;
    for (int64_t m0 = 0; m0 < g.m; m0 += kMaxM) {
      switch (std::min<int64_t>(kMaxM, g.m - m0)) {
#define CB_C1_CASE(MB)                             \
  case MB:                                         \
    forward_block<MB>(g, pd, xp, w, bias, m0, yn); \
    break;
        CB_C1_CASE(1)
        CB_C1_CASE(2)
        CB_C1_CASE(3)
        CB_C1_CASE(4) CB_C1_CASE(5) CB_C1_CASE(6) CB_C1_CASE(7) CB_C1_CASE(8)
#undef CB_C1_CASE
            default : break;
      }
    }
  }
}

// Channels [m0, m0 + MB) of one sample: part [M][kvol] (16 lanes each) += the taps' products.
// dyp [MB][OH][owp]: this sample's dY rows, columns zero-padded to owp.
template <int MB>
CB_INLINE void backward_block(const WindowGeom& g, const Padded& pd, const float* xp,
                              const float* dyp, int64_t m0, F16* part) {
  const int64_t kh_n = g.k[1], kw_n = g.k[2], kvol = kh_n * kw_n, oh_n = g.out[1];
  const int64_t plane = oh_n * pd.owp;
  for (int64_t kh = 0; kh < kh_n; ++kh)
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      // Two accumulators per channel (the block's two vectors): independent add chains.
      F16 acc[MB][2];
      for (int m = 0; m < MB; ++m) {
        acc[m][0] = part[(m0 + m) * kvol + kh * kw_n + kw];
        acc[m][1] = F16{};
      }
      for (int64_t oh = 0; oh < oh_n; ++oh) {
        const float* xr = xp + (oh + kh) * pd.xw + kw;
        const float* dr = dyp + oh * pd.owp;
        for (int64_t c = 0; c < pd.owp; c += kBlock) {
          F16 x0, x1;
          load(x0, xr + c);
          load(x1, xr + c + kV);
          for (int m = 0; m < MB; ++m) {
            F16 d0, d1;
            load(d0, dr + m * plane + c);
            load(d1, dr + m * plane + c + kV);
            acc[m][0] += d0 * x0;
            acc[m][1] += d1 * x1;
          }
        }
      }
      for (int m = 0; m < MB; ++m) part[(m0 + m) * kvol + kh * kw_n + kw] = acc[m][0] + acc[m][1];
    }
}

// As backward_block for kernels KW wide: each tap row's KW shifted input vectors and each
// channel's dY vector are loaded once for MB * KW multiply-adds (backward_block reloads dY per
// tap: load-bound); MB * KW accumulators stay in registers.
constexpr int max_mb(int kw) { return kw <= 3 ? 8 : (30 - kw) / kw; }

// xs [KW][rows][owp]: the padded plane's rows shifted left by kw, so that the tap loads are
// aligned (a 16-float load at an odd offset spans two cache lines and costs two load slots).
template <int MB, int KW>
CB_INLINE void backward_block_kw(const WindowGeom& g, const Padded& pd, const float* xs,
                                 const float* dyp, int64_t m0, F16* part) {
  const int64_t kh_n = g.k[1], kvol = kh_n * KW, oh_n = g.out[1], plane = oh_n * pd.owp;
  const int64_t shift = pd.rows * pd.owp;
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    F16 acc[MB][KW];
    for (int m = 0; m < MB; ++m)
      for (int kw = 0; kw < KW; ++kw) acc[m][kw] = F16{};
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      const float* xr = xs + (oh + kh) * pd.owp;
      const float* dr = dyp + oh * pd.owp;
      for (int64_t c = 0; c < pd.owp; c += kV) {
        F16 xv[KW];
        for (int kw = 0; kw < KW; ++kw) xv[kw] = *reinterpret_cast<const F16*>(xr + kw * shift + c);
        for (int m = 0; m < MB; ++m) {
          F16 d;
          load(d, dr + m * plane + c);
          for (int kw = 0; kw < KW; ++kw) acc[m][kw] += d * xv[kw];
        }
      }
    }
    for (int m = 0; m < MB; ++m)
      for (int kw = 0; kw < KW; ++kw) part[(m0 + m) * kvol + kh * KW + kw] += acc[m][kw];
  }
}

// Channels [m0, m0 + mb) with backward_block_kw<mb, KW> where it has the registers, else false.
template <int KW>
CB_INLINE bool backward_kw(const WindowGeom& g, const Padded& pd, const float* xs, const float* dyp,
                           int64_t m0, int64_t mb, F16* part) {
  if (mb > max_mb(KW)) return false;
  switch (mb) {
#define CB_C1_CASE(MB)                                                                   \
  case MB:                                                                               \
    if constexpr (MB <= max_mb(KW)) backward_block_kw<MB, KW>(g, pd, xs, dyp, m0, part); \
    return true;
    CB_C1_CASE(1)
    CB_C1_CASE(2)
    CB_C1_CASE(3)
    CB_C1_CASE(4) CB_C1_CASE(5) CB_C1_CASE(6) CB_C1_CASE(7) CB_C1_CASE(8)
#undef CB_C1_CASE
        default : return false;
  }
}

// dW of samples [n0, n1) into dw [M][kvol] (assigned).
CB_AVX512 void backward_samples(const WindowGeom& g, const float* x, const float* dy, float* dw,
                                int64_t n0, int64_t n1) {
  const Padded pd(g);
  const int64_t kvol = g.k[1] * g.k[2], oh_n = g.out[1], ow_n = g.out[2];
  const int64_t plane_in = g.in[1] * g.in[2];
  float* xp = scratch<float, 8>(pd.rows * pd.xw);
  float* dyp = scratch<float, 9>(kMaxM * oh_n * pd.owp);
  // 16-lane partial sums per weight, 64-byte aligned (scratch is a std::vector: 16 spare lanes).
  float* part_mem = scratch<float, 10>((g.m * kvol + 1) * kV);
  F16* part = reinterpret_cast<F16*>(align64(part_mem));
  std::fill(part, part + g.m * kvol, F16{});
  // Channel blocks of equal size, as large as the KW-wide loop has registers for.
  const int64_t kw_n = g.k[2];
  const int64_t cap = kw_n >= 1 && kw_n <= 7 ? max_mb(static_cast<int>(kw_n)) : kMaxM;
  const int64_t blocks = (g.m + cap - 1) / cap, block = (g.m + blocks - 1) / blocks;
  float* xs = align64(scratch<float, 12>(kw_n * pd.rows * pd.owp + kV));
  for (int64_t n = n0; n < n1; ++n) {
    pad_plane(g, pd, x + n * plane_in, xp);
    if (kw_n <= 7)
      for (int64_t kw = 0; kw < kw_n; ++kw)
        for (int64_t r = 0; r < pd.rows; ++r)
          for (int64_t c = 0; c < pd.owp; c += kV) {
            F16 v;
            load(v, xp + r * pd.xw + kw + c);
            store(xs + (kw * pd.rows + r) * pd.owp + c, v);
          }
    for (int64_t m0 = 0; m0 < g.m; m0 += block) {
      const int64_t mb = std::min<int64_t>(block, g.m - m0);
      for (int64_t m = 0; m < mb; ++m)
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          copy_row(dyp + (m * oh_n + oh) * pd.owp, dy + ((n * g.m + m0 + m) * oh_n + oh) * ow_n, 0,
                   ow_n, pd.owp);
        }
      bool done = false;
      switch (kw_n) {
#define CB_C1_KW(KW)                                      \
  case KW:                                                \
    done = backward_kw<KW>(g, pd, xs, dyp, m0, mb, part); \
    break;
        CB_C1_KW(1)
        CB_C1_KW(2)
        CB_C1_KW(3)
        CB_C1_KW(4) CB_C1_KW(5) CB_C1_KW(6) CB_C1_KW(7)
#undef CB_C1_KW
            default : break;
      }
      if (done) continue;
      switch (mb) {
#define CB_C1_CASE(MB)                            \
  case MB:                                        \
    backward_block<MB>(g, pd, xp, dyp, m0, part); \
    break;
        CB_C1_CASE(1)
        CB_C1_CASE(2)
        CB_C1_CASE(3)
        CB_C1_CASE(4) CB_C1_CASE(5) CB_C1_CASE(6) CB_C1_CASE(7) CB_C1_CASE(8)
#undef CB_C1_CASE
            default : break;
      }
    }
  }
  for (int64_t i = 0; i < g.m * kvol; ++i) {
    double s = 0;
    for (int l = 0; l < kV; ++l) s += part[i][l];
    dw[i] = static_cast<float>(s);
  }
}

}  // namespace

bool conv_c1(const KernelArgs& a) {
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  if (kernel_dtype(a) != DType::F32 || X.rank() != 4) return false;
  const auto& p = a.p<ops::ConvParams>();
  const WindowGeom g = window_geom("Conv", p.window, X.dims, Y.dims, p.group);
  if (!applies(g) || !have_avx512()) return false;
  const float* bias = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<float>() : nullptr;
  const int64_t cost = g.m * g.out_vol * g.k_vol;  // multiply-adds per sample
  parallel(g.n, cost, [&](int64_t n0, int64_t n1) {
    forward_samples(g, X.ptr<float>(), W.ptr<float>(), bias, Y.ptr<float>(), n0, n1);
  });
  return true;
}

bool conv_grad_c1(const KernelArgs& a) {
  const TensorView &dY = a.in[0], &X = a.in[1];
  const bool dx = a.out[0].present(), dw = a.out.size() > 1 && a.out[1].present();
  if (kernel_dtype(a) != DType::F32 || X.rank() != 4 || dx || !dw) return false;
  const auto& p = a.p<ops::ConvParams>();
  const WindowGeom g = window_geom("ConvGrad", p.window, X.dims, dY.dims, p.group);
  if (!applies(g) || g.n == 0 || !have_avx512()) return false;
  float* dW = a.out[1].ptr<float>();
  const int64_t w_size = g.m * g.k_vol;
  const int threads = current_pool() ? current_pool()->size() : 1;
  const bool split = threads > 1 && g.n > 1 && g.n * g.m * g.out_vol * g.k_vol >= 2 * kGrain;
  const int64_t want = split ? std::min<int64_t>(threads, g.n) : 1;
  const int64_t chunk = (g.n + want - 1) / want, parts = (g.n + chunk - 1) / chunk;
  if (parts <= 1) {
    backward_samples(g, X.ptr<float>(), dY.ptr<float>(), dW, 0, g.n);
    return true;
  }
  float* partials = scratch<float, 11>((parts - 1) * w_size);
  current_pool()->parallel_for(parts, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      backward_samples(g, X.ptr<float>(), dY.ptr<float>(),
                       t == 0 ? dW : partials + (t - 1) * w_size, t * chunk,
                       std::min(g.n, (t + 1) * chunk));
  });
  add_partials(a, dW, partials, parts - 1, w_size);
  return true;
}

}  // namespace cb::cpu
