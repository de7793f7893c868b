// The library ops' own logic (kernels/cuda/library.cu): what surrounds the cuDNN and cuBLASLt
// calls, written against launch.h so that it compiles in both builds. library.cu instantiates it
// with the libraries (CudaLib); anything else that provides the same four calls (a `Lib`) can run
// it, e.g. a host-run stand-in whose "library" is the direct kernels below.
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
// Gemm / MatMul (cuBLASLt is column-major):
//   - LtProblem: D [m x n] = op(A) [m x k] op(B) [k x n], column-major, with a strided batch. A
//     row-major product Y = op(A) op(B) is the column-major Y^T = op(B)^T op(A)^T: the library's
//     A is our B and its B is our A (row_major_product()).
//   - Gemm: beta * C broadcast into Y first (as the CPU does), then the product accumulates onto
//     it (beta 1), or overwrites (beta 0) when C is absent or beta is 0.
//   - MatMul: the batch dims (numpy broadcasting, 1-D operands promoted) with unit dims dropped,
//     adjacent dims merged where all three operands stay linear; the innermost becomes the
//     library's strided batch (stride 0 for a broadcast operand), the rest a host loop of calls.
//     A shared right-hand matrix folds the batch into the rows (one plain product).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS::lib {

// ---- convolution geometry -----------------------------------------------------------------------
struct ConvShape {
  int nsp = 0;  // spatial dims of the op (1 to 3); the arrays hold 3, leading ones unit
  int64_t n = 0, c = 0, m = 0, groups = 1, cg = 0, mg = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  int64_t in_vol = 1, out_vol = 1, k_vol = 1;
};

// X [N,C,D...] (*) W [M,C/G,k...] -> Y [N,M,D'...] with the window of `p` (pads resolved).
inline ConvShape conv_shape(const char* op, const ops::ConvParams& p, const std::vector<int64_t>& x,
                            const std::vector<int64_t>& y) {
  const ops::WindowAttrs& w = p.window;
  if (x.size() < 3 || x.size() > 5 || y.size() != x.size())
    fail("{}: input rank {} / output rank {}: 1 to 3 spatial dims are supported", op, x.size(),
         y.size());
  const size_t r = x.size() - 2;
  if (w.kernel_shape.size() != r || w.pads.size() != 2 * r ||
      (!w.strides.empty() && w.strides.size() != r) ||
      (!w.dilations.empty() && w.dilations.size() != r))
    fail("{}: the window attributes do not match {} spatial dims (kernel_shape {}, pads {})", op, r,
         w.kernel_shape.size(), w.pads.size());
  if (p.group <= 0 || x[1] % p.group != 0 || y[1] % p.group != 0)
    fail("{}: {} input and {} output channels do not split into {} groups", op, x[1], y[1],
         p.group);
  ConvShape g;
  g.nsp = static_cast<int>(r);
  g.n = x[0];
  g.c = x[1];
  g.m = y[1];
  g.groups = p.group;
  g.cg = g.c / p.group;
  g.mg = g.m / p.group;
  for (size_t i = 0; i < r; ++i) {
    const size_t j = 3 - r + i;
    g.in[j] = x[2 + i];
    g.out[j] = y[2 + i];
    g.k[j] = w.kernel_shape[i];
    g.s[j] = w.strides.empty() ? 1 : w.strides[i];
    g.d[j] = w.dilations.empty() ? 1 : w.dilations[i];
    g.pb[j] = w.pads[i];
    g.pe[j] = w.pads[i + r];
    if (g.k[j] <= 0 || g.s[j] <= 0 || g.d[j] <= 0)
      fail("{}: kernel {}, stride {}, dilation {} must be positive", op, g.k[j], g.s[j], g.d[j]);
  }
  g.in_vol = g.in[0] * g.in[1] * g.in[2];
  g.out_vol = g.out[0] * g.out[1] * g.out[2];
  g.k_vol = g.k[0] * g.k[1] * g.k[2];
  return g;
}

// The problem as the library runs it: symmetric pads, the input shifted into X' when the pads
// are asymmetric (see the file comment). ok: the library can express it.
struct LibConv {
  ConvShape g;                   // g.in: X' extents; g.pb == g.pe: the symmetric pads
  int64_t shift[3] = {0, 0, 0};  // X'[j] = X[j - shift]
  bool shifted = false;
  bool ok = false;
};

inline LibConv lib_conv(const ConvShape& s) {
  LibConv L;
  L.g = s;
  if (s.n <= 0 || s.c <= 0 || s.m <= 0 || s.in_vol <= 0 || s.out_vol <= 0) return L;
  for (int j = 0; j < 3; ++j) {
    const int64_t p = std::max<int64_t>(0, std::min(s.pb[j], s.pe[j]));
    const int64_t eb = s.pb[j] - p, ee = s.pe[j] - p;
    const int64_t in = s.in[j] + eb + ee;
    const int64_t span = s.d[j] * (s.k[j] - 1) + 1;
    // The library derives the output extent itself; it must be the op's.
    if (in <= 0 || in + 2 * p < span || (in + 2 * p - span) / s.s[j] + 1 != s.out[j]) return L;
    L.g.in[j] = in;
    L.g.pb[j] = L.g.pe[j] = p;
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
                     dims(g.n, g.c, g.in), dims(g.m, g.cg, g.k), dims(g.n, g.m, g.out), list(g.pb),
                     list(g.pe), list(g.s), list(g.d), g.groups);
}

// ---- kernels ------------------------------------------------------------------------------------
// Extents of a shift: dst [nc, dst_ext] from src [nc, src_ext], dst[j] = src[j + delta] (zero
// outside src).
struct ShiftGeom {
  int64_t nc = 0;
  int64_t dst[3] = {1, 1, 1}, src[3] = {1, 1, 1}, delta[3] = {0, 0, 0};
};

template <class T>
void shift_copy(const GpuCtx& c, const ShiftGeom& sg, const T* src, T* dst) {
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
    dst[i] = in ? src[nc * svol + (i0 * sg.src[1] + i1) * sg.src[2] + i2] : T(0);
  });
}

// X [N,C,D...] -> X' of the library problem.
template <class T>
void shift_in(const GpuCtx& c, const LibConv& L, const ConvShape& s, const T* x, T* xp) {
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
template <class T>
void shift_out(const GpuCtx& c, const LibConv& L, const ConvShape& s, const T* dxp, T* dx) {
  ShiftGeom sg;
  sg.nc = s.n * s.c;
  for (int j = 0; j < 3; ++j) {
    sg.dst[j] = s.in[j];
    sg.src[j] = L.g.in[j];
    sg.delta[j] = L.shift[j];
  }
  shift_copy(c, sg, dxp, dx);
}

// Y = X (*) W (+ bias), one thread per element of Y.
template <class T>
void direct_fwd(const GpuCtx& c, const ConvShape& g, const T* x, const T* w, const T* bias, T* y) {
  parallel_for(c, g.n * g.m * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    int64_t t = i;
    const int64_t o2 = t % g.out[2];
    t /= g.out[2];
    const int64_t o1 = t % g.out[1];
    t /= g.out[1];
    const int64_t o0 = t % g.out[0];
    t /= g.out[0];
    const int64_t m = t % g.m, n = t / g.m;
    const T* xb = x + (n * g.c + (m / g.mg) * g.cg) * g.in_vol;
    const T* wb = w + m * g.cg * g.k_vol;
    double acc = 0;
    for (int64_t cl = 0; cl < g.cg; ++cl)
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        if (i0 < 0 || i0 >= g.in[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
          const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
          if (i1 < 0 || i1 >= g.in[1]) continue;
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
            const int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
            if (i2 < 0 || i2 >= g.in[2]) continue;
            acc += double(xb[cl * g.in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2]) *
                   double(wb[cl * g.k_vol + (k0 * g.k[1] + k1) * g.k[2] + k2]);
          }
        }
      }
    if (bias) acc += double(bias[m]);
    y[i] = T(acc);
  });
}

// dX = the adjoint of X -> X (*) W applied to dY, one thread per element of dX.
template <class T>
void direct_bwd_data(const GpuCtx& c, const ConvShape& g, const T* dy, const T* w, T* dx) {
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
      const T* dyb = dy + (n * g.m + m) * g.out_vol;
      const T* wb = w + (m * g.cg + cl) * g.k_vol;
      for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
        const int64_t t0 = i0 + g.pb[0] - k0 * g.d[0];
        if (t0 < 0 || t0 % g.s[0] != 0 || t0 / g.s[0] >= g.out[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
          const int64_t t1 = i1 + g.pb[1] - k1 * g.d[1];
          if (t1 < 0 || t1 % g.s[1] != 0 || t1 / g.s[1] >= g.out[1]) continue;
          for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
            const int64_t t2 = i2 + g.pb[2] - k2 * g.d[2];
            if (t2 < 0 || t2 % g.s[2] != 0 || t2 / g.s[2] >= g.out[2]) continue;
            acc += double(dyb[((t0 / g.s[0]) * g.out[1] + t1 / g.s[1]) * g.out[2] + t2 / g.s[2]]) *
                   double(wb[(k0 * g.k[1] + k1) * g.k[2] + k2]);
          }
        }
      }
    }
    dx[i] = T(acc);
  });
}

// dW[m, cl, k...] = sum over n and the output positions of X * dY: a reduction per weight.
template <class T>
void direct_bwd_filter(const GpuCtx& c, const ConvShape& g, const T* x, const T* dy, T* dw) {
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
        const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
        const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
        const int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
        if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2])
          return 0.0;
        const int64_t ch = (m / g.mg) * g.cg + cl;
        return double(x[(n * g.c + ch) * g.in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2]) *
               double(dy[(n * g.m + m) * g.out_vol + (o0 * g.out[1] + o1) * g.out[2] + o2]);
      },
      [=] CB_HOST_DEVICE(double a, double b) -> double { return a + b; },
      [=] CB_HOST_DEVICE(int64_t o, double acc) { dw[o] = T(acc); });
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

// ---- GEMM problems ------------------------------------------------------------------------------
// D [m x n] = op(A) [m x k] x op(B) [k x n], column-major (element (i, j) of a matrix with
// leading dimension ld at i + j * ld); `batch` of them at element strides sa, sb, sd.
struct LtProblem {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, sa = 0, sb = 0, sd = 0;
};

// Row-major Y [M, N] (leading dim N) = op(A) x op(B), A row-major [M, K] ([K, M] when ta) with
// leading dim lda, B [K, N] ([N, K] when tb) with leading dim ldb: the column-major
// Y^T = op(B)^T op(A)^T, i.e. the library's A is our B and its B is our A.
inline LtProblem row_major_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                   int64_t ldb) {
  LtProblem p;
  p.ta = tb;
  p.tb = ta;
  p.m = N;
  p.n = M;
  p.k = K;
  p.lda = ldb;
  p.ldb = lda;
  p.ldd = N;
  return p;
}

// One library call of a MatMul: the problem and the element offsets of its operands (lib_a is
// the MatMul's B, lib_b its A, d its Y).
struct LtCall {
  LtProblem p;
  int64_t a_off = 0, b_off = 0, d_off = 0;
};

// The library's problem, when it cannot run it: one thread per element of D, f64 accumulation.
// beta == 0: D is not read.
template <class T>
void naive_gemm(const GpuCtx& c, const LtProblem& p, double alpha, double beta, const T* A,
                const T* B, T* D) {
  parallel_for(c, p.batch * p.m * p.n, [=] CB_HOST_DEVICE(int64_t t) {
    const int64_t i = t % p.m, j = (t / p.m) % p.n, b = t / (p.m * p.n);
    const T* a = A + b * p.sa;
    const T* bb = B + b * p.sb;
    T* d = D + b * p.sd + i + j * p.ldd;
    double acc = 0;
    for (int64_t l = 0; l < p.k; ++l)
      acc += double(p.ta ? a[l + i * p.lda] : a[i + l * p.lda]) *
             double(p.tb ? bb[j + l * p.ldb] : bb[l + j * p.ldb]);
    *d = beta == 0 ? T(alpha * acc) : T(alpha * acc + beta * double(*d));
  });
}

// MatMul [...,M,K] x [...,K,N] (1-D operands promoted) as library calls; m, n, k and the batch
// count come back too. No calls when the output is empty.
struct MatMulPlan {
  int64_t m = 0, n = 0, k = 0, count = 1;
  std::vector<LtCall> calls;
};

constexpr int64_t kMaxLibBatch = 65535;  // a strided batch larger than this is split

// A batch dim of a MatMul: its size and the element strides of A, B and Y (0: broadcast).
struct BDim {
  int64_t size, sa, sb, sy;
};

inline MatMulPlan matmul_plan(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  MatMulPlan r;
  const size_t ra = a.size(), rb = b.size();
  if (ra == 0 || rb == 0) fail("MatMul: operands must have rank >= 1, got {} and {}", ra, rb);
  r.m = ra == 1 ? 1 : a[ra - 2];
  r.k = a[ra - 1];
  r.n = rb == 1 ? 1 : b[rb - 1];
  const int64_t kb = rb == 1 ? b[0] : b[rb - 2];
  if (kb != r.k) fail("MatMul: inner dims differ ({} vs {})", r.k, kb);
  const size_t na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, nbatch = std::max(na, nb);
  std::vector<BDim> dims;  // innermost first
  int64_t st_a = r.m * r.k, st_b = r.k * r.n, st_y = r.m * r.n;
  for (size_t i = 0; i < nbatch; ++i) {
    const int64_t da = i < na ? a[na - 1 - i] : 1, db = i < nb ? b[nb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail("MatMul: batch dims {} and {} do not broadcast", da, db);
    const int64_t size = da == 1 ? db : da;
    r.count *= size;
    if (size != 1) dims.push_back({size, da == 1 ? 0 : st_a, db == 1 ? 0 : st_b, st_y});
    st_a *= da;
    st_b *= db;
    st_y *= size;
  }
  if (r.count == 0 || r.m == 0 || r.n == 0 || r.k == 0) return r;  // nothing or zeros: the caller
  // Merge an outer dim into the inner one before it where all three stay linear.
  std::vector<BDim> merged;  // innermost first
  for (const BDim& d : dims) {
    if (!merged.empty()) {
      BDim& e = merged.back();
      if (d.sa == e.sa * e.size && d.sb == e.sb * e.size && d.sy == e.sy * e.size) {
        e.size *= d.size;
        continue;
      }
    }
    merged.push_back(d);
  }
  BDim inner{1, 0, 0, r.m * r.n};
  if (!merged.empty()) {
    inner = merged.front();
    merged.erase(merged.begin());
  }
  LtProblem base;
  if (inner.size > 1 && inner.sb == 0 && inner.sa == r.m * r.k) {
    // One right-hand matrix for this batch: [size*M, K] x [K, N] -> [size*M, N].
    base = row_major_product(false, false, inner.size * r.m, r.n, r.k, r.k, r.n);
    inner = {1, 0, 0, r.m * r.n};
  } else {
    base = row_major_product(false, false, r.m, r.n, r.k, r.k, r.n);
  }
  // The outer dims (innermost first in `merged`) as a host loop.
  int64_t outer = 1;
  for (const BDim& d : merged) outer *= d.size;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, oa = 0, ob = 0, oy = 0;
    for (const BDim& d : merged) {
      const int64_t idx = rem % d.size;
      rem /= d.size;
      oa += idx * d.sa;
      ob += idx * d.sb;
      oy += idx * d.sy;
    }
    for (int64_t b0 = 0; b0 < inner.size; b0 += kMaxLibBatch) {
      LtCall call;
      call.p = base;
      call.p.batch = std::min(kMaxLibBatch, inner.size - b0);
      call.p.sa = inner.sb;  // the library's A is our B
      call.p.sb = inner.sa;
      call.p.sd = inner.sy;
      call.a_off = ob + b0 * inner.sb;
      call.b_off = oa + b0 * inner.sa;
      call.d_off = oy + b0 * inner.sy;
      r.calls.push_back(call);
    }
  }
  return r;
}

// ---- the ops, over a library `Lib` --------------------------------------------------------------
// Lib provides (static):
//   size_t conv_workspace(const GpuCtx&, ConvDir, const ConvShape&, DType, const void* x,
//                         const void* w, const void* y);
//   bool conv(const GpuCtx&, ConvDir, const ConvShape&, DType, void* x, void* w, void* y,
//             void* ws, size_t ws_bytes);   // false: it declines (nothing was enqueued)
//   size_t gemm_workspace(const GpuCtx&, const LtProblem&, DType, const void* a, const void* b,
//                         const void* d);
//   bool gemm(const GpuCtx&, const LtProblem&, DType, double alpha, double beta, const void* a,
//             const void* b, void* d, void* ws, size_t ws_bytes);
// The ConvShape handed to conv() is always a LibConv's (symmetric pads, g.in the X' extents).
// Pointers given to the workspace functions may be null (not yet known): assume them aligned.

inline const void* ws_at(const KernelArgs& a, size_t off) {
  return static_cast<const char*>(a.workspace) + off;
}
inline size_t ws_left(const KernelArgs& a, size_t off) {
  return a.workspace && a.workspace_bytes > off ? a.workspace_bytes - off : 0;
}

template <class Lib, class T>
void conv_run(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &X = a.in[0], &W = a.in[1], &Y = a.out[0];
  const T* bias = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<T>() : nullptr;
  const ConvShape s = conv_shape("Conv", p, X.dims, Y.dims);
  if (Y.numel() == 0) return;
  const LibConv L = lib_conv(s);
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
  const ConvShape s = conv_shape("Conv", a.p<ops::ConvParams>(), a.in[0].dims, a.out[0].dims);
  const LibConv L = lib_conv(s);
  if (!L.ok) return 0;
  const size_t scratch = shift_bytes(L, a.in[0].dtype);
  return scratch + Lib::conv_workspace(c, ConvDir::Fwd, L.g, a.in[0].dtype,
                                       L.shifted ? nullptr : a.in[0].data, a.in[1].data,
                                       a.out[0].data);
}

// ConvGrad(dY, X, W) -> dX?, dW?, dB?
template <class Lib, class T>
void conv_grad_run(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::ConvParams>();
  const TensorView &dY = a.in[0], &X = a.in[1], &W = a.in[2];
  T* dx = a.out[0].present() ? a.out[0].ptr<T>() : nullptr;
  T* dw = a.out.size() > 1 && a.out[1].present() ? a.out[1].ptr<T>() : nullptr;
  T* db = a.out.size() > 2 && a.out[2].present() ? a.out[2].ptr<T>() : nullptr;
  const ConvShape s = conv_shape("ConvGrad", p, X.dims, dY.dims);
  if (db) bias_grad(c, s.n, s.m, s.out_vol, dY.ptr<T>(), db);
  if (!dx && !dw) return;
  const LibConv L = lib_conv(s);
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
  const bool dx = a.out[0].present(), dw = a.out.size() > 1 && a.out[1].present();
  if (!dx && !dw) return 0;
  const LibConv L = lib_conv(conv_shape("ConvGrad", a.p<ops::ConvParams>(), X.dims, dY.dims));
  if (!L.ok) return 0;
  const size_t scratch = shift_bytes(L, X.dtype);
  size_t lib = 0;
  if (dw)
    lib = Lib::conv_workspace(c, ConvDir::BwdFilter, L.g, X.dtype, L.shifted ? nullptr : X.data,
                              a.out[1].data, dY.data);
  if (dx)
    lib = std::max(lib, Lib::conv_workspace(c, ConvDir::BwdData, L.g, X.dtype,
                                            L.shifted ? nullptr : a.out[0].data, W.data, dY.data));
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

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, double> ? DType::F64 : DType::F32;
}

// Runs one problem through the library, or the naive kernel where it declines.
template <class Lib, class T>
void gemm_call(const KernelArgs& a, const GpuCtx& c, const LtProblem& p, double alpha, double beta,
               const T* A, const T* B, T* D) {
  if (!Lib::gemm(c, p, dtype_of<T>(), alpha, beta, A, B, D, a.workspace, ws_left(a, 0)))
    naive_gemm(c, p, alpha, beta, A, B, D);
}

// Gemm: Y [M,N] = alpha * op(A) op(B) + beta * C (C broadcast to [M,N]).
template <class Lib, class T>
void gemm_run(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::GemmParams>();
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  if (A.rank() != 2 || B.rank() != 2 || Y.rank() != 2)
    fail("Gemm: A, B and Y must be 2-D (got ranks {}, {}, {})", A.rank(), B.rank(), Y.rank());
  const int64_t m = Y.dims[0], n = Y.dims[1], k = p.trans_a ? A.dims[0] : A.dims[1];
  T* y = Y.ptr<T>();
  const T beta = static_cast<T>(p.beta);
  const bool has_c = a.in.size() > 2 && a.in[2].present() && beta != T(0);
  if (has_c) {  // Y = beta * C broadcast to [M,N], as the CPU does
    const TensorView& C = a.in[2];
    const T* cp = C.ptr<T>();
    int64_t sm = 0, sn = 0;
    if (C.rank() == 2) {
      sm = C.dims[0] == 1 ? 0 : C.dims[1];
      sn = C.dims[1] == 1 ? 0 : 1;
    } else if (C.rank() == 1) {
      sn = C.dims[0] == 1 ? 0 : 1;
    } else if (C.rank() != 0) {
      fail("Gemm: C must have rank 0 to 2, got {}", C.rank());
    }
    parallel_for(c, m * n,
                 [=] CB_HOST_DEVICE(int64_t i) { y[i] = beta * cp[(i / n) * sm + (i % n) * sn]; });
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!has_c) fill_zero(c, y, Y.bytes());
    return;
  }
  const LtProblem lp = row_major_product(p.trans_a, p.trans_b, m, n, k, A.dims[1], B.dims[1]);
  gemm_call<Lib, T>(a, c, lp, static_cast<double>(static_cast<T>(p.alpha)), has_c ? 1.0 : 0.0,
                    B.ptr<T>(), A.ptr<T>(), y);
}

template <class Lib>
size_t gemm_ws(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::GemmParams>();
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  if (A.rank() != 2 || B.rank() != 2 || Y.rank() != 2) return 0;
  const int64_t m = Y.dims[0], n = Y.dims[1], k = p.trans_a ? A.dims[0] : A.dims[1];
  if (m == 0 || n == 0 || k == 0) return 0;
  const LtProblem lp = row_major_product(p.trans_a, p.trans_b, m, n, k, A.dims[1], B.dims[1]);
  return Lib::gemm_workspace(c, lp, A.dtype, B.data, A.data, Y.data);
}

template <class Lib, class T>
void matmul_run(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const MatMulPlan plan = matmul_plan(A.dims, B.dims);
  if (Y.numel() == 0) return;
  if (plan.k == 0) {
    fill_zero(c, Y.data, Y.bytes());
    return;
  }
  const T* pa = A.ptr<T>();
  const T* pb = B.ptr<T>();
  T* py = Y.ptr<T>();
  for (const LtCall& call : plan.calls)
    gemm_call<Lib, T>(a, c, call.p, 1.0, 0.0, pb + call.a_off, pa + call.b_off, py + call.d_off);
}

template <class Lib>
size_t matmul_ws(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &A = a.in[0], &B = a.in[1], &Y = a.out[0];
  const MatMulPlan plan = matmul_plan(A.dims, B.dims);
  const size_t es = dtype_size(A.dtype);
  auto at = [&](const TensorView& v, int64_t off) -> const void* {
    return v.data ? static_cast<const char*>(v.data) + static_cast<size_t>(off) * es : nullptr;
  };
  size_t ws = 0;
  for (size_t i = 0; i < plan.calls.size(); ++i) {
    const LtCall& call = plan.calls[i];
    // Calls of one plan differ only in their offsets: one per distinct alignment suffices, and
    // the library's cache makes repeats cheap; cap the scan for huge host loops.
    if (i >= 64) break;
    ws = std::max(ws, Lib::gemm_workspace(c, call.p, A.dtype, at(B, call.a_off), at(A, call.b_off),
                                          at(Y, call.d_off)));
  }
  return ws;
}

// The kernel-table entries over `Lib`: F32 and F64 (the CPU's masks).
template <class Lib>
struct Ops {
#define CB_LIB_DISPATCH(NAME, RUN)                         \
  static void NAME(const KernelArgs& a, const GpuCtx& c) { \
    switch (kernel_dtype(a)) {                             \
      case DType::F32:                                     \
        RUN<Lib, float>(a, c);                             \
        break;                                             \
      case DType::F64:                                     \
        RUN<Lib, double>(a, c);                            \
        break;                                             \
      default:                                             \
        unsupported_dtype(#NAME, kernel_dtype(a));         \
    }                                                      \
  }
  CB_LIB_DISPATCH(Conv, conv_run)
  CB_LIB_DISPATCH(ConvGrad, conv_grad_run)
  CB_LIB_DISPATCH(ConvTranspose, conv_transpose_run)
  CB_LIB_DISPATCH(Gemm, gemm_run)
  CB_LIB_DISPATCH(MatMul, matmul_run)
#undef CB_LIB_DISPATCH
  static size_t ConvWs(const KernelArgs& a, const GpuCtx& c) { return conv_ws<Lib>(a, c); }
  static size_t ConvGradWs(const KernelArgs& a, const GpuCtx& c) { return conv_grad_ws<Lib>(a, c); }
  static size_t ConvTransposeWs(const KernelArgs& a, const GpuCtx& c) {
    return conv_transpose_ws<Lib>(a, c);
  }
  static size_t GemmWs(const KernelArgs& a, const GpuCtx& c) { return gemm_ws<Lib>(a, c); }
  static size_t MatMulWs(const KernelArgs& a, const GpuCtx& c) { return matmul_ws<Lib>(a, c); }
};

}  // namespace cb::CB_GPU_NS::lib
