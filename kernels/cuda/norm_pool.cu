// Normalization and pooling kernels of the CUDA backend, mirroring the CPU backend's
// (kernels/cpu/batch_normalization.cpp, layer_normalization.cpp, norm_grad.cpp, pool.cpp,
// pool_grad.cpp): same attributes, dtypes and rules.
//   - Statistics (BatchNorm per channel over N and the spatial dims, LayerNorm per row) are
//     segmented reductions in double, two-pass (mean, then squared deviations) as on the CPU; the
//     last pass's store computes the per-channel / per-row coefficients (workspace, double) and
//     writes the small outputs (running statistics, Mean/InvStdDev, dscale, dB); one thread per
//     element then applies them.
//   - Pooling: one thread per output (forwards); the gradients are gathers over input positions
//     (each sums the windows covering it in ascending output order, as the CPU's += does), so no
//     atomics and no zero fill. MaxPoolGrad first records each window's argmax (workspace) with
//     the forward's rule: window order (kd, kh, kw), the first maximum wins, NaN wins, padding
//     never wins.
#include <limits>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- shared helpers -----------------------------------------------------------------------------
struct AddD {
  CB_HOST_DEVICE double operator()(double x, double y) const { return x + y; }
};
struct Sums2 {
  double a, b;
};
struct AddSums2 {
  CB_HOST_DEVICE Sums2 operator()(Sums2 x, Sums2 y) const { return {x.a + y.a, x.b + y.b}; }
};
struct Sums3 {
  double a, b, c;
};
struct AddSums3 {
  CB_HOST_DEVICE Sums3 operator()(Sums3 x, Sums3 y) const {
    return {x.a + y.a, x.b + y.b, x.c + y.c};
  }
};

// An f32 or f64 [C] tensor read as double (BatchNorm's parameters may differ from X's dtype).
struct Real {
  const void* p;
  bool f64;
  CB_HOST_DEVICE double at(int64_t i) const {
    return f64 ? static_cast<const double*>(p)[i]
               : static_cast<double>(static_cast<const float*>(p)[i]);
  }
};
// An optional f32 or f64 output written from double (p == nullptr: absent).
struct RealOut {
  void* p;
  bool f64;
  CB_HOST_DEVICE void put(int64_t i, double v) const {
    if (!p) return;
    if (f64)
      static_cast<double*>(p)[i] = v;
    else
      static_cast<float*>(p)[i] = static_cast<float>(v);
  }
};
Real real_of(const TensorView& v) { return {v.data, v.dtype == DType::F64}; }
RealOut real_out(const KernelArgs& a, size_t i) {
  if (a.out.size() > i && a.out[i].present()) return {a.out[i].data, a.out[i].dtype == DType::F64};
  return {nullptr, false};
}
template <class T>
T* out_ptr(const KernelArgs& a, size_t i) {
  return a.out.size() > i && a.out[i].present() ? a.out[i].ptr<T>() : nullptr;
}
// The workspace as T*, after checking that the caller gave the bytes `ws` asks for.
template <class T>
T* workspace_of(const KernelArgs& a, const GpuCtx& c, GpuWorkspaceFn ws, const char* op) {
  const size_t need = ws(a, c);
  if (need > 0 && (!a.workspace || a.workspace_bytes < need))
    fail("{}: needs a workspace of {} bytes, got {}", op, need,
         a.workspace ? a.workspace_bytes : size_t{0});
  return static_cast<T*>(a.workspace);
}

// ---- BatchNormalization -------------------------------------------------------------------------
// X [N, C, S]: channel ch, element j in [0, N*S) of it sits at (j / S) * C * S + ch * S + j % S.
struct BnShape {
  int64_t n, c, s, count;
};
BnShape bn_shape(const TensorView& X) {
  BnShape b;
  b.n = X.dims[0];
  b.c = X.dims[1];
  b.s = b.n * b.c != 0 ? X.numel() / (b.n * b.c) : 0;
  b.count = b.n * b.s;
  return b;
}

// Workspace: mean, var, mul, add [C] (double).
size_t bn_workspace(const KernelArgs& a, const GpuCtx&) {
  return 4 * static_cast<size_t>(a.in[0].dims[1]) * sizeof(double);
}

template <class T>
void batch_norm(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::BatchNormalizationParams>();
  const BnShape sh = bn_shape(a.in[0]);
  const int64_t ch = sh.c, s = sh.s, cs = sh.c * sh.s, count = sh.count;
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  double* ws = workspace_of<double>(a, c, &bn_workspace, "BatchNormalization");
  double *mean = ws, *var = ws + ch, *mul = ws + 2 * ch, *add = ws + 3 * ch;
  const Real scale = real_of(a.in[1]), bias = real_of(a.in[2]);
  const Real rmean = real_of(a.in[3]), rvar = real_of(a.in[4]);
  const double eps = static_cast<double>(p.epsilon);
  if (p.training) {
    const double mom = p.momentum;
    const double unbias = p.unbiased_running_var && count > 1
                              ? static_cast<double>(count) / static_cast<double>(count - 1)
                              : 1;
    const RealOut o_rm = real_out(a, 1), o_rv = real_out(a, 2), o_sm = real_out(a, 3),
                  o_sv = real_out(a, 4);
    segmented_reduce(
        c, ch, count, 0.0,
        [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
          return static_cast<double>(x[(j / s) * cs + o * s + j % s]);
        },
        AddD{},
        [=] CB_HOST_DEVICE(int64_t o, double acc) {
          mean[o] = count ? acc / static_cast<double>(count) : 0;
        });
    segmented_reduce(
        c, ch, count, 0.0,
        [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
          const double d = static_cast<double>(x[(j / s) * cs + o * s + j % s]) - mean[o];
          return d * d;
        },
        AddD{},
        [=] CB_HOST_DEVICE(int64_t o, double acc) {
          const double mu = mean[o], v = count ? acc / static_cast<double>(count) : 0;
          var[o] = v;
          const double m = scale.at(o) / math::m_sqrt(v + eps);
          mul[o] = m;
          add[o] = bias.at(o) - mu * m;
          // The running statistics: each channel read before it is written (outputs 1..4 may
          // alias inputs 3/4).
          const double rm = rmean.at(o), rv = rvar.at(o);
          o_rm.put(o, rm * mom + mu * (1 - mom));
          o_rv.put(o, rv * mom + v * unbias * (1 - mom));
          o_sm.put(o, mu);
          o_sv.put(o, v);
        });
  } else {
    parallel_for(c, ch, [=] CB_HOST_DEVICE(int64_t o) {
      const double m = scale.at(o) / math::m_sqrt(rvar.at(o) + eps);
      mul[o] = m;
      add[o] = bias.at(o) - rmean.at(o) * m;
    });
  }
  parallel_for(c, a.in[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t k = (i / s) % ch;
    y[i] = x[i] * static_cast<T>(mul[k]) + static_cast<T>(add[k]);
  });
}

// ---- BatchNormalizationGrad ---------------------------------------------------------------------
// Workspace: mean [C], then per channel the dx coefficients k, b, q, mu [C][4] (double).
size_t bn_grad_workspace(const KernelArgs& a, const GpuCtx&) {
  return 5 * static_cast<size_t>(a.in[1].dims[1]) * sizeof(double);
}

template <class T>
void batch_norm_grad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::BatchNormalizationParams>();
  const BnShape sh = bn_shape(a.in[1]);
  const int64_t ch = sh.c, s = sh.s, cs = sh.c * sh.s, count = sh.count;
  const T *dy = a.in[0].ptr<T>(), *x = a.in[1].ptr<T>();
  T* dx = out_ptr<T>(a, 0);
  const RealOut o_ds = real_out(a, 1), o_db = real_out(a, 2);
  const Real scale = real_of(a.in[2]);
  double* ws = workspace_of<double>(a, c, &bn_grad_workspace, "BatchNormalizationGrad");
  double *mean = ws, *coef = ws + ch;
  const double eps = static_cast<double>(p.epsilon);
  segmented_reduce(
      c, ch, count, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return static_cast<double>(x[(j / s) * cs + o * s + j % s]);
      },
      AddD{},
      [=] CB_HOST_DEVICE(int64_t o, double acc) {
        mean[o] = count ? acc / static_cast<double>(count) : 0;
      });
  // Per channel: sum((x - mean)^2), sum(dy), sum(dy * (x - mean)).
  segmented_reduce(
      c, ch, count, Sums3{0, 0, 0},
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> Sums3 {
        const int64_t at = (j / s) * cs + o * s + j % s;
        const double d = static_cast<double>(x[at]) - mean[o], g = static_cast<double>(dy[at]);
        return {d * d, g, g * d};
      },
      AddSums3{},
      [=] CB_HOST_DEVICE(int64_t o, Sums3 acc) {
        const double var = count ? acc.a / static_cast<double>(count) : 0;
        const double invstd = 1.0 / math::m_sqrt(var + eps);
        const double sdy = acc.b, sdyx = acc.c * invstd;  // sum(dy * xhat)
        o_db.put(o, sdy);
        o_ds.put(o, sdyx);
        // dx = k * (dy - b - (x - mean) * q), k = scale * invstd (as the CPU)
        const double inv_m = count ? 1.0 / static_cast<double>(count) : 0;
        coef[4 * o] = scale.at(o) * invstd;
        coef[4 * o + 1] = sdy * inv_m;
        coef[4 * o + 2] = invstd * sdyx * inv_m;
        coef[4 * o + 3] = mean[o];
      });
  if (!dx) return;
  parallel_for(c, a.in[1].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const double* k = coef + 4 * ((i / s) % ch);
    const T kk = static_cast<T>(k[0]), b = static_cast<T>(k[1]), q = static_cast<T>(k[2]),
            mu = static_cast<T>(k[3]);
    dx[i] = kk * (dy[i] - b - (x[i] - mu) * q);
  });
}

// ---- LayerNormalization -------------------------------------------------------------------------
// X viewed as [outer, m], m = prod(dims[axis:]); `norm` = dims[axis:].
struct LnShape {
  int64_t outer = 1, m = 1;
  std::vector<int64_t> norm;
};
LnShape ln_shape(const KernelArgs& a, const TensorView& X) {
  const auto& p = a.p<ops::LayerNormalizationParams>();
  const int64_t r = X.rank(), axis = p.axis < 0 ? p.axis + r : p.axis;
  LnShape l;
  for (int64_t d = 0; d < r; ++d) (d < axis ? l.outer : l.m) *= X.dims[static_cast<size_t>(d)];
  l.norm.assign(X.dims.begin() + axis, X.dims.end());
  return l;
}

// Workspace: mean, inv [outer] (double).
size_t ln_workspace(const KernelArgs& a, const GpuCtx&) {
  return 2 * static_cast<size_t>(ln_shape(a, a.in[0]).outer) * sizeof(double);
}

template <class T>
void layer_norm(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::LayerNormalizationParams>();
  const TensorView &X = a.in[0], &S = a.in[1];
  const bool has_b = a.in.size() > 2 && a.in[2].present();
  const LnShape l = ln_shape(a, X);
  const int64_t outer = l.outer, m = l.m;
  const Dims nd = dims_of(l.norm), ss = broadcast_strides(S.dims, l.norm);
  const Dims bs = has_b ? broadcast_strides(a.in[2].dims, l.norm) : Dims{};
  const T *x = X.ptr<T>(), *sc = S.ptr<T>(), *b = has_b ? a.in[2].ptr<T>() : nullptr;
  T* y = a.out[0].ptr<T>();
  float *mean_out = out_ptr<float>(a, 1), *inv_out = out_ptr<float>(a, 2);
  double* ws = workspace_of<double>(a, c, &ln_workspace, "LayerNormalization");
  double *mean = ws, *inv = ws + outer;
  const double eps = static_cast<double>(p.epsilon);
  segmented_reduce(
      c, outer, m, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return static_cast<double>(x[o * m + j]);
      },
      AddD{},
      [=] CB_HOST_DEVICE(int64_t o, double acc) {
        mean[o] = m > 0 ? acc / static_cast<double>(m) : 0.0;
      });
  segmented_reduce(
      c, outer, m, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        const double d = static_cast<double>(x[o * m + j]) - mean[o];
        return d * d;
      },
      AddD{},
      [=] CB_HOST_DEVICE(int64_t o, double acc) {
        const double iv = 1.0 / math::m_sqrt((m > 0 ? acc / static_cast<double>(m) : 0.0) + eps);
        inv[o] = iv;
        if (mean_out) mean_out[o] = static_cast<float>(mean[o]);
        if (inv_out) inv_out[o] = static_cast<float>(iv);
      });
  parallel_for(c, outer * m, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t row = i / m, k = i % m;
    const T tm = static_cast<T>(mean[row]), ti = static_cast<T>(inv[row]);
    const T sk = sc[offset_of(k, nd, ss)];
    const T bk = b ? b[offset_of(k, nd, bs)] : T(0);
    y[i] = (x[i] - tm) * ti * sk + bk;
  });
}

// ---- LayerNormalizationGrad ---------------------------------------------------------------------
// Workspace: mean, inv, b, q [outer] (double).
size_t ln_grad_workspace(const KernelArgs& a, const GpuCtx&) {
  return 4 * static_cast<size_t>(ln_shape(a, a.in[1]).outer) * sizeof(double);
}

template <class T>
void layer_norm_grad(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::LayerNormalizationParams>();
  const TensorView &X = a.in[1], &S = a.in[2];
  const LnShape l = ln_shape(a, X);
  const int64_t outer = l.outer, m = l.m, nr = static_cast<int64_t>(l.norm.size());
  const Dims nd = dims_of(l.norm), ss = broadcast_strides(S.dims, l.norm);
  const T *dy = a.in[0].ptr<T>(), *x = X.ptr<T>(), *sc = S.ptr<T>();
  T* dx = out_ptr<T>(a, 0);
  T *ds = out_ptr<T>(a, 1), *db = out_ptr<T>(a, 2);
  double* ws = workspace_of<double>(a, c, &ln_grad_workspace, "LayerNormalizationGrad");
  double *mean = ws, *inv = ws + outer, *cb = ws + 2 * outer, *cq = ws + 3 * outer;
  const double eps = static_cast<double>(p.epsilon);
  const double inv_m = m > 0 ? 1.0 / static_cast<double>(m) : 0.0;
  segmented_reduce(
      c, outer, m, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return static_cast<double>(x[o * m + j]);
      },
      AddD{}, [=] CB_HOST_DEVICE(int64_t o, double acc) { mean[o] = acc * inv_m; });
  // Per row: sum((x - mean)^2), sum(g), sum(g * (x - mean)) with g = dy * scale.
  segmented_reduce(
      c, outer, m, Sums3{0, 0, 0},
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> Sums3 {
        const double d = static_cast<double>(x[o * m + j]) - mean[o];
        const double g =
            static_cast<double>(dy[o * m + j]) * static_cast<double>(sc[offset_of(j, nd, ss)]);
        return {d * d, g, g * d};
      },
      AddSums3{},
      [=] CB_HOST_DEVICE(int64_t o, Sums3 acc) {
        const double iv = 1.0 / math::m_sqrt(acc.a * inv_m + eps);
        inv[o] = iv;
        cb[o] = acc.b * inv_m;
        cq[o] = acc.c * iv * inv_m * iv;  // sum(g * xhat) * iv / m
      });
  if (dx)
    parallel_for(c, outer * m, [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t row = i / m, k = i % m;
      const T ti = static_cast<T>(inv[row]), tmu = static_cast<T>(mean[row]);
      const T b = static_cast<T>(cb[row]), q = static_cast<T>(cq[row]);
      dx[i] = ti * (dy[i] * sc[offset_of(k, nd, ss)] - b - (x[i] - tmu) * q);
    });
  if (!ds && !db) return;
  // dscale, dB [like scale]: output o sums, over the rows and the r = m / |scale| positions k of
  // a row that scale broadcasts to o, dy * xhat and dy. k = kept(o) + reduced(jr).
  const int64_t n_out = S.numel();
  if (n_out == 0) return;
  Dims kept, kept_st, red, red_st;
  int64_t st = 1;
  for (int64_t d = nr - 1; d >= 0; --d) st *= l.norm[static_cast<size_t>(d)];
  for (int64_t d = 0, off = nr - S.rank(); d < nr; ++d) {
    const int64_t n = l.norm[static_cast<size_t>(d)];
    st /= n > 0 ? n : 1;
    const int64_t sd = d - off >= 0 ? S.dims[static_cast<size_t>(d - off)] : 1;
    Dims &dims = sd != 1 ? kept : red, &strides = sd != 1 ? kept_st : red_st;
    dims.d[dims.rank++] = n;
    strides.d[strides.rank++] = st;
  }
  const int64_t r = m / n_out;
  segmented_reduce(
      c, n_out, outer * r, Sums2{0, 0},
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> Sums2 {
        const int64_t row = j / r, k = offset_of(o, kept, kept_st) + offset_of(j % r, red, red_st);
        const double g = static_cast<double>(dy[row * m + k]);
        return {g * (static_cast<double>(x[row * m + k]) - mean[row]) * inv[row], g};
      },
      AddSums2{},
      [=] CB_HOST_DEVICE(int64_t o, Sums2 acc) {
        if (ds) ds[o] = static_cast<T>(acc.a);
        if (db) db[o] = static_cast<T>(acc.b);
      });
}

// ---- pooling geometry ---------------------------------------------------------------------------
// A 1-D/2-D/3-D window as 3-D ([depth, height, width], leading 1s), as the CPU's WindowGeom.
struct PoolGeom {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, p[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  int64_t planes = 0, in_vol = 1, out_vol = 1;
};
PoolGeom pool_geom(const ops::WindowAttrs& w, const std::vector<int64_t>& x,
                   const std::vector<int64_t>& y) {
  PoolGeom g;
  const size_t r = x.size() - 2;
  if (r < 1 || r > 3 || w.kernel_shape.size() != r || w.pads.size() != 2 * r)
    fail("pooling: unsupported window ({} spatial dims, {} kernel dims, {} pads)", r,
         w.kernel_shape.size(), w.pads.size());
  g.planes = x[0] * x[1];
  for (size_t i = 0; i < r; ++i) {
    const size_t j = 3 - r + i;
    g.in[j] = x[2 + i];
    g.out[j] = y[2 + i];
    g.k[j] = w.kernel_shape[i];
    g.s[j] = w.strides.empty() ? 1 : w.strides[i];
    g.d[j] = w.dilations.empty() ? 1 : w.dilations[i];
    g.p[j] = w.pads[i];
    g.pe[j] = w.pads[i + r];
  }
  g.in_vol = g.in[0] * g.in[1] * g.in[2];
  g.out_vol = g.out[0] * g.out[1] * g.out[2];
  return g;
}

// The CPU's 2x2/stride-2 fast path (max_pool_2x2.h), whose maximum starts from the first element.
bool is_max_pool_2x2(const PoolGeom& g) {
  return g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 && g.k[1] == 2 && g.k[2] == 2 &&
         g.s[1] == 2 && g.s[2] == 2 && g.d[1] == 1 && g.d[2] == 1 && g.p[1] == 0 && g.p[2] == 0 &&
         2 * g.out[1] <= g.in[1] && 2 * g.out[2] <= g.in[2];
}

// Output position o of a plane -> its window's start along each axis.
CB_HOST_DEVICE inline void window_start(const PoolGeom& g, int64_t o, int64_t st[3]) {
  const int64_t ow = o % g.out[2], oh = (o / g.out[2]) % g.out[1], od = o / (g.out[2] * g.out[1]);
  st[0] = od * g.s[0] - g.p[0];
  st[1] = oh * g.s[1] - g.p[1];
  st[2] = ow * g.s[2] - g.p[2];
}

// Window positions t in [0, k) with start + t*dil inside [lo, hi).
CB_HOST_DEVICE inline int64_t count_in(int64_t start, int64_t k, int64_t dil, int64_t lo,
                                       int64_t hi) {
  int64_t n = 0;
  for (int64_t i = 0; i < k; ++i) n += start + i * dil >= lo && start + i * dil < hi;
  return n;
}

// The outputs [lo, hi) along axis `ax` whose windows may cover input position i (those with
// (i + p - o*s) a multiple of d cover it).
CB_HOST_DEVICE inline void covering(const PoolGeom& g, int ax, int64_t i, int64_t& lo,
                                    int64_t& hi) {
  const int64_t t = i + g.p[ax] - (g.k[ax] - 1) * g.d[ax];
  lo = t <= 0 ? 0 : (t + g.s[ax] - 1) / g.s[ax];
  hi = (i + g.p[ax]) / g.s[ax] + 1;
  hi = hi < g.out[ax] ? hi : g.out[ax];
}
CB_HOST_DEVICE inline bool covers(const PoolGeom& g, int ax, int64_t i, int64_t o) {
  return (i + g.p[ax] - o * g.s[ax]) % g.d[ax] == 0;
}

template <class T>
CB_HOST_DEVICE inline bool pool_greater(T v, T best) {
  if constexpr (math::kIsFloat<T>)
    return v > best || (v != v && best == best);  // NaN propagates, as in PyTorch
  else
    return v > best;
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
  for (int64_t kd = 0; kd < g.k[0]; ++kd) {
    const int64_t id = st[0] + kd * g.d[0];
    if (id < 0 || id >= g.in[0]) continue;
    for (int64_t kh = 0; kh < g.k[1]; ++kh) {
      const int64_t ih = st[1] + kh * g.d[1];
      if (ih < 0 || ih >= g.in[1]) continue;
      const int64_t row = (id * g.in[1] + ih) * g.in[2];
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t iw = st[2] + kw * g.d[2];
        if (iw < 0 || iw >= g.in[2]) continue;
        const T v = xp[row + iw];
        if ((first_takes && at < 0) || pool_greater(v, best)) {
          best = v;
          at = row + iw;
        }
      }
    }
  }
  return at;
}

// ---- MaxPool ------------------------------------------------------------------------------------
template <class T>
void max_pool(const KernelArgs& a, const GpuCtx& c) {
  const auto& p = a.p<ops::PoolParams>();
  const PoolGeom g = pool_geom(p.window, a.in[0].dims, a.out[0].dims);
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  int64_t* ind = out_ptr<int64_t>(a, 1);
  const bool col_major = p.storage_order == 1;
  const bool first_takes = ind || is_max_pool_2x2(g);
  const T lowest = std::numeric_limits<T>::lowest();
  parallel_for(c, g.planes * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
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
  const PoolGeom g = pool_geom(p.window, a.in[0].dims, a.out[0].dims);
  const T* x = a.in[0].ptr<T>();
  T* y = a.out[0].ptr<T>();
  const bool include_pad = p.count_include_pad;
  parallel_for(c, g.planes * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.out_vol, o = i % g.out_vol;
    const T* xp = x + pc * g.in_vol;
    int64_t st[3];
    window_start(g, o, st);
    T sum = 0;
    int64_t valid = 0;
    for (int64_t kd = 0; kd < g.k[0]; ++kd) {
      const int64_t id = st[0] + kd * g.d[0];
      if (id < 0 || id >= g.in[0]) continue;
      for (int64_t kh = 0; kh < g.k[1]; ++kh) {
        const int64_t ih = st[1] + kh * g.d[1];
        if (ih < 0 || ih >= g.in[1]) continue;
        const T* xr = xp + (id * g.in[1] + ih) * g.in[2];
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t iw = st[2] + kw * g.d[2];
          if (iw < 0 || iw >= g.in[2]) continue;
          sum += xr[iw];
          ++valid;
        }
      }
    }
    int64_t div = valid;
    if (include_pad) {
      div = 1;
      for (int ax = 0; ax < 3; ++ax)
        div *= count_in(st[ax], g.k[ax], g.d[ax], -g.p[ax], g.in[ax] + g.pe[ax]);
    }
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
  const PoolGeom g = pool_geom(p.window, a.in[1].dims, a.in[0].dims);
  const T *dy = a.in[0].ptr<T>(), *x = a.in[1].ptr<T>();
  T* dx = a.out[0].ptr<T>();
  int64_t* arg = workspace_of<int64_t>(a, c, &max_pool_grad_workspace, "MaxPoolGrad");
  parallel_for(c, g.planes * g.out_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.out_vol;
    T best;
    arg[i] = window_argmax(g, x + pc * g.in_vol, i % g.out_vol, true, T(0), best);
  });
  // dx at input position q: the sum of dy over the windows whose argmax is q, in output order.
  parallel_for(c, g.planes * g.in_vol, [=] CB_HOST_DEVICE(int64_t i) {
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
  const PoolGeom g = pool_geom(p.window, a.out[0].dims, a.in[0].dims);  // in 1 is dX's dims
  const T* dy = a.in[0].ptr<T>();
  T* dx = a.out[0].ptr<T>();
  const bool include_pad = p.count_include_pad;
  // dx at input position q: the sum over the windows covering it (in output order) of
  // dy / divisor, the forward's divisor.
  parallel_for(c, g.planes * g.in_vol, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t pc = i / g.in_vol, q = i % g.in_vol;
    const int64_t at[3] = {q / (g.in[2] * g.in[1]), (q / g.in[2]) % g.in[1], q % g.in[2]};
    const T* dyp = dy + pc * g.out_vol;
    int64_t lo[3], hi[3];
    for (int ax = 0; ax < 3; ++ax) covering(g, ax, at[ax], lo[ax], hi[ax]);
    // The divisor's factor along axis ax for output o (separable: a product over the axes).
    auto factor = [&](int ax, int64_t o) {
      const int64_t start = o * g.s[ax] - g.p[ax];
      return include_pad ? count_in(start, g.k[ax], g.d[ax], -g.p[ax], g.in[ax] + g.pe[ax])
                         : count_in(start, g.k[ax], g.d[ax], 0, g.in[ax]);
    };
    T sum = T(0);
    for (int64_t od = lo[0]; od < hi[0]; ++od) {
      if (!covers(g, 0, at[0], od)) continue;
      const int64_t fd = factor(0, od);
      for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
        if (!covers(g, 1, at[1], oh)) continue;
        const int64_t fh = fd * factor(1, oh);
        for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
          if (!covers(g, 2, at[2], ow)) continue;
          const int64_t div = fh * factor(2, ow);
          if (div <= 0) continue;
          sum += dyp[(od * g.out[1] + oh) * g.out[2] + ow] / static_cast<T>(div);
        }
      }
    }
    dx[i] = sum;
  });
}

// ---- dispatch -----------------------------------------------------------------------------------
void BatchNormalization(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(kernel_dtype(a), "BatchNormalization", batch_norm, a, c)
}
void BatchNormalizationGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, "BatchNormalizationGrad", batch_norm_grad, a, c)
}
void LayerNormalization(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "LayerNormalization", layer_norm, a, c)
}
void LayerNormalizationGrad(const KernelArgs& a, const GpuCtx& c) {
  CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, "LayerNormalizationGrad", layer_norm_grad, a, c)
}
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
    {OpKind::BatchNormalization, &BatchNormalization, kFloat, &bn_workspace},
    {OpKind::BatchNormalizationGrad, &BatchNormalizationGrad, kFloat, &bn_grad_workspace},
    {OpKind::GlobalAveragePool, &GlobalAveragePool, kFloat},
    {OpKind::LayerNormalization, &LayerNormalization, kFloat, &ln_workspace},
    {OpKind::LayerNormalizationGrad, &LayerNormalizationGrad, kFloat, &ln_grad_workspace},
    {OpKind::MaxPool, &MaxPool, kFloat | type_bit(DType::I8) | type_bit(DType::U8)},
    {OpKind::MaxPoolGrad, &MaxPoolGrad, kFloat, &max_pool_grad_workspace},
};

}  // namespace

std::span<const GpuKernel> norm_pool_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
