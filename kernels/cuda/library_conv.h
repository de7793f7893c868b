// Convolutions over a library `Lib` (library_util.h), and their direct fallback kernels.
//
// Convolutions (Conv, ConvGrad, ConvTranspose; NCHW, 1-D to 3-D, groups, strides, dilations):
//   - ConvShape: the op's geometry, spatial dims padded to 3 with leading unit dims (a 1-D conv is
//     a 2-D one with H = 1 to the library). Pads are the resolved ones of ConvParams (begin, end;
//     ConvTranspose's may be negative).
//   - LibConv: the same problem as the library runs it, with symmetric pads p = max(0, min(begin,
//     end)) per dim; the rest (begin - p, end - p, either sign) shifts the input: X' [N,C,D'...]
//     with X'[j] = X[j - (begin - p)] (zero outside X, D' = D + begin + end - 2p) is written into
//     the workspace by shift_copy(); a data gradient computed over X' is shifted back the same
//     way. Zero-sized problems, and geometries the library cannot express, are not LibConv::ok.
//   - Direct kernels (one thread per output element, f64 accumulation): the fallback whenever the
//     library declines (no engine, workspace too small, zero sizes). They read the begin pads only,
//     so any pads (asymmetric, negative) run as they are.
//   - ConvGrad: dB by segmented_reduce over (N, spatial) in f64; dW (filter gradient) before dX,
//     so that both can use the one shifted-input scratch buffer in turn.
//   - ConvTranspose: the data gradient of the Conv Y -> X (its ConvParams::window), then the bias.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_util.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS::lib {

// ---- convolution geometry -----------------------------------------------------------------------
// The op's window (kernels/common/geometry.h): spatial dims padded to 3 with leading unit dims,
// pads p (begin) and pe (end).
using ConvShape = geom::WindowGeom;

// X [N,C,D...] (*) W [M,C/G,k...] -> Y [N,M,D'...] with the window of `p` (pads resolved).
inline ConvShape conv_shape(const char* op, const ops::ConvParams& p, const std::vector<int64_t>& x,
                            const std::vector<int64_t>& y) {
  return geom::window_geom(op, p.window, x, y, p.group);
}

// The problem as the library runs it: symmetric pads, the input shifted into X' when the pads
// are asymmetric (see the file comment). ok: the library can express it.
struct LibConv {
  ConvShape g;                   // g.in: X' extents; g.p == g.pe: the symmetric pads
  int64_t shift[3] = {0, 0, 0};  // X'[j] = X[j - shift]
  bool shifted = false;
  bool ok = false;
};

inline LibConv lib_conv(const ConvShape& s) {
  LibConv L;
  L.g = s;
  if (s.n <= 0 || s.c <= 0 || s.m <= 0 || s.in_vol <= 0 || s.out_vol <= 0) return L;
  for (int j = 0; j < 3; ++j) {
    const int64_t p = std::max<int64_t>(0, std::min(s.p[j], s.pe[j]));
    const int64_t eb = s.p[j] - p, ee = s.pe[j] - p;
    const int64_t in = s.in[j] + eb + ee;
    const int64_t span = s.d[j] * (s.k[j] - 1) + 1;
    // The library derives the output extent itself; it must be the op's.
    if (in <= 0 || in + 2 * p < span || (in + 2 * p - span) / s.s[j] + 1 != s.out[j]) return L;
    L.g.in[j] = in;
    L.g.p[j] = L.g.pe[j] = p;
    L.shift[j] = eb;
    L.shifted = L.shifted || eb != 0 || ee != 0;
  }
  L.g.in_vol = L.g.in[0] * L.g.in[1] * L.g.in[2];
  L.ok = true;
  return L;
}

inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Bytes of the shifted input X' [N, C, D'...] in the workspace (0 when not shifted), rounded up so
// that the library's own workspace after it stays 256-byte aligned.
inline size_t shift_bytes(const LibConv& L, DType t) {
  if (!L.shifted) return 0;
  return round_up(static_cast<size_t>(L.g.n * L.g.c * L.g.in_vol) * dtype_size(t), 256);
}

// Which convolution the library runs. Its three tensors are always X [N,C,D...], W [M,C/G,k...]
// and Y [N,M,D'...] (the symmetric problem's); the direction says which of them it writes:
// Fwd: Y from (X, W); BwdData: X (dX) from (Y = dY, W); BwdFilter: W (dW) from (X, Y = dY).
enum class ConvDir { Fwd, BwdData, BwdFilter };

inline const char* dir_name(ConvDir d) {
  return d == ConvDir::Fwd       ? "forward"
         : d == ConvDir::BwdData ? "backward data"
                                 : "backward filter";
}

// For messages: "X [2,4,13,12] W [6,2,3,2] Y [2,6,6,4] pads 0,1+0,1 strides 2,3 dilations 1,1
// groups 2" (pads: begins+ends).
inline std::string describe(const ConvShape& g) {
  auto list = [&](const int64_t* v) {
    std::string s;
    for (int j = 3 - g.nsp; j < 3; ++j) {
      if (!s.empty()) s += ',';
      s += std::to_string(v[j]);
    }
    return s;
  };
  auto dims = [&](int64_t a, int64_t b, const int64_t* v) {
    return fmt::format("[{},{},{}]", a, b, list(v));
  };
  return fmt::format("X {} W {} Y {} pads {}+{} strides {} dilations {} groups {}",
                     dims(g.n, g.c, g.in), dims(g.m, g.cg, g.k), dims(g.n, g.m, g.out), list(g.p),
                     list(g.pe), list(g.s), list(g.d), g.groups);
}

// ---- kernels ------------------------------------------------------------------------------------
// Extents of a shift: dst [nc, dst_ext] from src [nc, src_ext], dst[j] = src[j + delta] (zero
// outside src).
struct ShiftGeom {
  int64_t nc = 0;
  int64_t dst[3] = {1, 1, 1}, src[3] = {1, 1, 1}, delta[3] = {0, 0, 0};
};

// S -> D converts (math::cast_store: bf16 rounds to nearest even), so that bf16 operands are
// rounded and shifted in one pass (library_bf16.h).
template <class S, class D>
void shift_copy(const GpuCtx& c, const ShiftGeom& sg, const S* src, D* dst) {
  const int64_t vol = sg.dst[0] * sg.dst[1] * sg.dst[2];
  const int64_t svol = sg.src[0] * sg.src[1] * sg.src[2];
  parallel_for(c, sg.nc * vol, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t t = i;
    const int64_t j2 = t % sg.dst[2];
    t /= sg.dst[2];
    const int64_t j1 = t % sg.dst[1];
    t /= sg.dst[1];
    const int64_t j0 = t % sg.dst[0];
    const int64_t nc = t / sg.dst[0];
    const int64_t i0 = j0 + sg.delta[0], i1 = j1 + sg.delta[1], i2 = j2 + sg.delta[2];
    const bool in =
        i0 >= 0 && i0 < sg.src[0] && i1 >= 0 && i1 < sg.src[1] && i2 >= 0 && i2 < sg.src[2];
    dst[i] = in ? math::cast_store<D>(
                      math::cast_load(src[nc * svol + (i0 * sg.src[1] + i1) * sg.src[2] + i2]))
                : D{};
  });
}

// X [N,C,D...] -> X' of the library problem.
template <class S, class D>
void shift_in(const GpuCtx& c, const LibConv& L, const ConvShape& s, const S* x, D* xp) {
  ShiftGeom sg;
  sg.nc = s.n * s.c;
  for (int j = 0; j < 3; ++j) {
    sg.dst[j] = L.g.in[j];
    sg.src[j] = s.in[j];
    sg.delta[j] = -L.shift[j];
  }
  shift_copy(c, sg, x, xp);
}

// dX' of the library problem -> dX [N,C,D...] (positions of X outside X' get 0).
template <class S, class D>
void shift_out(const GpuCtx& c, const LibConv& L, const ConvShape& s, const S* dxp, D* dx) {
  ShiftGeom sg;
  sg.nc = s.n * s.c;
  for (int j = 0; j < 3; ++j) {
    sg.dst[j] = s.in[j];
    sg.src[j] = L.g.in[j];
    sg.delta[j] = L.shift[j];
  }
  shift_copy(c, sg, dxp, dx);
}

// The direct kernels read operands of type TI (f32, f64, or math::BF16Bits: bf16-rounded operands,
// library_bf16.h) and write TO, accumulating in f64.
template <class T>
CB_HOST_DEVICE inline double ld(T v) {
  return double(math::cast_load(v));
}

// Y = X (*) W (+ bias), one thread per element of Y.
template <class TI, class TO>
void direct_fwd(const GpuCtx& c, const ConvShape& g, const TI* x, const TI* w, const TO* bias,
                TO* y) {
  parallel_for(c, g.n * g.m * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t t = i;
    const int64_t o2 = t % g.out[2];
    t /= g.out[2];
    const int64_t o1 = t % g.out[1];
    t /= g.out[1];
    const int64_t o0 = t % g.out[0];
    t /= g.out[0];
    const int64_t m = t % g.m, n = t / g.m;
    const TI* xb = x + (n * g.c + (m / g.mg) * g.cg) * g.in_vol;
    const TI* wb = w + m * g.cg * g.k_vol;
    double acc = 0;
    for (int64_t cl = 0; cl < g.cg; ++cl)
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
        if (i0 < 0 || i0 >= g.in[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
          const int64_t i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
          if (i1 < 0 || i1 >= g.in[1]) continue;
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
            const int64_t i2 = o2 * g.s[2] - g.p[2] + k2 * g.d[2];
            if (i2 < 0 || i2 >= g.in[2]) continue;
            acc += ld(xb[cl * g.in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2]) *
                   ld(wb[cl * g.k_vol + (k0 * g.k[1] + k1) * g.k[2] + k2]);
          }
        }
      }
    if (bias) acc += ld(bias[m]);
    y[i] = math::cast_store<TO>(acc);
  });
}

// dX = the adjoint of X -> X (*) W applied to dY, one thread per element of dX.
template <class TI, class TO>
void direct_bwd_data(const GpuCtx& c, const ConvShape& g, const TI* dy, const TI* w, TO* dx) {
  parallel_for(c, g.n * g.c * g.in_vol, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t t = i;
    const int64_t i2 = t % g.in[2];
    t /= g.in[2];
    const int64_t i1 = t % g.in[1];
    t /= g.in[1];
    const int64_t i0 = t % g.in[0];
    t /= g.in[0];
    const int64_t ch = t % g.c, n = t / g.c;
    const int64_t gi = ch / g.cg, cl = ch % g.cg;
    double acc = 0;
    for (int64_t ml = 0; ml < g.mg; ++ml) {
      const int64_t m = gi * g.mg + ml;
      const TI* dyb = dy + (n * g.m + m) * g.out_vol;
      const TI* wb = w + (m * g.cg + cl) * g.k_vol;
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t t0 = i0 + g.p[0] - k0 * g.d[0];
        if (t0 < 0 || t0 % g.s[0] != 0 || t0 / g.s[0] >= g.out[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
          const int64_t t1 = i1 + g.p[1] - k1 * g.d[1];
          if (t1 < 0 || t1 % g.s[1] != 0 || t1 / g.s[1] >= g.out[1]) continue;
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
            const int64_t t2 = i2 + g.p[2] - k2 * g.d[2];
            if (t2 < 0 || t2 % g.s[2] != 0 || t2 / g.s[2] >= g.out[2]) continue;
            acc += ld(dyb[((t0 / g.s[0]) * g.out[1] + t1 / g.s[1]) * g.out[2] + t2 / g.s[2]]) *
                   ld(wb[(k0 * g.k[1] + k1) * g.k[2] + k2]);
          }
        }
      }
    }
    dx[i] = math::cast_store<TO>(acc);
  });
}

// dW[m, cl, k...] = sum over n and the output positions of X * dY: a reduction per weight.
template <class TI, class TO>
void direct_bwd_filter(const GpuCtx& c, const ConvShape& g, const TI* x, const TI* dy, TO* dw) {
  segmented_reduce(
      c, g.m * g.cg * g.k_vol, g.n * g.out_vol, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        const int64_t k2 = o % g.k[2];
        int64_t t = o / g.k[2];
        const int64_t k1 = t % g.k[1];
        t /= g.k[1];
        const int64_t k0 = t % g.k[0];
        t /= g.k[0];
        const int64_t cl = t % g.cg, m = t / g.cg;
        const int64_t o2 = j % g.out[2];
        int64_t u = j / g.out[2];
        const int64_t o1 = u % g.out[1];
        u /= g.out[1];
        const int64_t o0 = u % g.out[0], n = u / g.out[0];
        const int64_t i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
        const int64_t i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
        const int64_t i2 = o2 * g.s[2] - g.p[2] + k2 * g.d[2];
        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2])
          return 0.0;
        const int64_t ch = (m / g.mg) * g.cg + cl;
        return ld(x[(n * g.c + ch) * g.in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2]) *
               ld(dy[(n * g.m + m) * g.out_vol + (o0 * g.out[1] + o1) * g.out[2] + o2]);
      },
      [=] CB_HOST_DEVICE(double a, double b) -> double { return a + b; },
      [=] CB_HOST_DEVICE(int64_t o, double acc) { dw[o] = math::cast_store<TO>(acc); });
}

// dB[m] = sum over n and the spatial positions of dY [N, M, vol], in f64 (as the CPU).
template <class T>
void bias_grad(const GpuCtx& c, int64_t n, int64_t m, int64_t vol, const T* dy, T* db) {
  segmented_reduce(
      c, m, n * vol, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return double(dy[((j / vol) * m + o) * vol + j % vol]);
      },
      [=] CB_HOST_DEVICE(double a, double b) -> double { return a + b; },
      [=] CB_HOST_DEVICE(int64_t o, double acc) { db[o] = T(acc); });
}

// y [N, M, vol] += b[M]
template <class T>
void add_bias(const GpuCtx& c, int64_t n, int64_t m, int64_t vol, const T* b, T* y) {
  parallel_for(c, n * m * vol, [=] CB_HOST_DEVICE(int64_t i) { y[i] += b[(i / vol) % m]; });
}

// ---- the ops ----------------------------------------------------------------------------------
// Conv(X, W, B?) -> Y: the op's geometry, its library problem and the bias (null when absent).
template <class T>
struct ConvFwdArgs {
  ConvShape s;
  LibConv L;
  const T* bias;
};

template <class T>
ConvFwdArgs<T> conv_fwd_args(const KernelArgs& a) {
  const ConvShape s = conv_shape("Conv", a.p<ops::ConvParams>(), a.in[0].dims, a.out[0].dims);
  const T* bias = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<T>() : nullptr;
  return {s, lib_conv(s), bias};
}

template <class Lib, class T>
void conv_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const auto [s, L, bias] = conv_fwd_args<T>(a);
  if (Y.numel() == 0) return;
  const size_t scratch = shift_bytes(L, X.dtype);
  if (L.ok && (scratch == 0 || ws_left(a, 0) >= scratch)) {
    T* xp = const_cast<T*>(X.ptr<T>());
    if (L.shifted) {
      xp = static_cast<T*>(a.workspace);
      shift_in(c, L, s, X.ptr<T>(), xp);
    }
    if (Lib::conv(c, ConvDir::Fwd, L.g, X.dtype, xp, W.data, Y.data,
                  const_cast<void*>(ws_at(a, scratch)), ws_left(a, scratch))) {
      if (bias) add_bias(c, s.n, s.m, s.out_vol, bias, Y.ptr<T>());
      return;
    }
  }
  direct_fwd(c, s, X.ptr<T>(), W.ptr<T>(), bias, Y.ptr<T>());
}

template <class Lib>
size_t conv_ws(const KernelArgs& a, const GpuCtx& c) {
  const LibConv L = conv_fwd_args<float>(a).L;
  if (!L.ok) return 0;
  const size_t scratch = shift_bytes(L, a.in[0].dtype);
  return scratch + Lib::conv_workspace(c, ConvDir::Fwd, L.g, a.in[0].dtype,
                                       L.shifted ? nullptr : a.in[0].data, a.in[1].data,
                                       a.out[0].data);
}

// ConvGrad(dY, X, W) -> dX?, dW?, dB?: the outputs asked for (null when not), the op's geometry
// and its library problem.
template <class T>
struct ConvGradArgs {
  T *dx, *dw, *db;
  ConvShape s;
  LibConv L;
};

template <class T>
ConvGradArgs<T> conv_grad_args(const KernelArgs& a) {
  auto out = [&](size_t i) -> T* {
    return a.out.size() > i && a.out[i].present() ? a.out[i].ptr<T>() : nullptr;
  };
  const ConvShape s = conv_shape("ConvGrad", a.p<ops::ConvParams>(), a.in[1].dims, a.in[0].dims);
  return {out(0), out(1), out(2), s, lib_conv(s)};
}

template <class Lib, class T>
void conv_grad_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const auto [dx, dw, db, s, L] = conv_grad_args<T>(a);
  if (db) bias_grad(c, s.n, s.m, s.out_vol, dY.ptr<T>(), db);
  if (!dx && !dw) return;
  const size_t scratch = shift_bytes(L, X.dtype);
  const bool lib = L.ok && (scratch == 0 || ws_left(a, 0) >= scratch);
  void* ws = const_cast<void*>(ws_at(a, scratch));
  const size_t ws_bytes = ws_left(a, scratch);
  T* buf = static_cast<T*>(a.workspace);  // X' (for dW), then dX' (for dX)
  if (dw) {
    bool done = false;
    if (lib) {
      T* xp = const_cast<T*>(X.ptr<T>());
      if (L.shifted) {
        xp = buf;
        shift_in(c, L, s, X.ptr<T>(), xp);
      }
      done = Lib::conv(c, ConvDir::BwdFilter, L.g, X.dtype, xp, dw, dY.data, ws, ws_bytes);
    }
    if (!done) direct_bwd_filter(c, s, X.ptr<T>(), dY.ptr<T>(), dw);
  }
  if (dx) {
    bool done = false;
    if (lib) {
      T* target = L.shifted ? buf : dx;
      done = Lib::conv(c, ConvDir::BwdData, L.g, X.dtype, target, W.data, dY.data, ws, ws_bytes);
      if (done && L.shifted) shift_out(c, L, s, buf, dx);
    }
    if (!done) direct_bwd_data(c, s, dY.ptr<T>(), W.ptr<T>(), dx);
  }
}

template <class Lib>
size_t conv_grad_ws(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  const auto [dx, dw, db, s, L] = conv_grad_args<char>(a);
  if ((!dx && !dw) || !L.ok) return 0;
  const size_t scratch = shift_bytes(L, X.dtype);
  size_t lib = 0;
  if (dw)
    lib = Lib::conv_workspace(c, ConvDir::BwdFilter, L.g, X.dtype, L.shifted ? nullptr : X.data, dw,
                              dY.data);
  if (dx)
    lib = std::max(lib, Lib::conv_workspace(c, ConvDir::BwdData, L.g, X.dtype,
                                            L.shifted ? nullptr : dx, W.data, dY.data));
  return scratch + lib;
}

// ConvTranspose(X, W, B?) -> Y: the data gradient of the Conv Y -> X (conv_transpose.cpp).
template <class Lib, class T>
void conv_transpose_run(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const T* bias = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<T>() : nullptr;
  // The Conv's input is Y, its output X.
  const ConvShape s = conv_shape("ConvTranspose", p, Y.dims, X.dims);
  if (Y.numel() == 0) return;
  const LibConv L = lib_conv(s);
  const size_t scratch = shift_bytes(L, Y.dtype);
  bool done = false;
  if (L.ok && (scratch == 0 || ws_left(a, 0) >= scratch)) {
    T* target = L.shifted ? static_cast<T*>(a.workspace) : Y.ptr<T>();
    done = Lib::conv(c, ConvDir::BwdData, L.g, Y.dtype, target, W.data, X.data,
                     const_cast<void*>(ws_at(a, scratch)), ws_left(a, scratch));
    if (done && L.shifted) shift_out(c, L, s, target, Y.ptr<T>());
  }
  if (!done) direct_bwd_data(c, s, X.ptr<T>(), W.ptr<T>(), Y.ptr<T>());
  if (bias) add_bias(c, s.n, s.c, s.in_vol, bias, Y.ptr<T>());
}

template <class Lib>
size_t conv_transpose_ws(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const LibConv L = lib_conv(conv_shape("ConvTranspose", a.p<ops::ConvParams>(), Y.dims, X.dims));
  if (!L.ok) return 0;
  return shift_bytes(L, Y.dtype) + Lib::conv_workspace(c, ConvDir::BwdData, L.g, Y.dtype,
                                                       L.shifted ? nullptr : Y.data, W.data,
                                                       X.data);
}

}  // namespace cb::CB_GPU_NS::lib
