// Normalization kernels of the CUDA backend, mirroring the CPU backend's
// (kernels/cpu/batch_normalization.cpp, layer_normalization.cpp, norm_grad.cpp): same attributes,
// dtypes and rules. Statistics (BatchNorm per channel over N and the spatial dims, LayerNorm per
// row) are segmented reductions in double, two-pass (mean, then squared deviations) as on the
// CPU; the last pass's store computes the per-channel / per-row coefficients (workspace, double)
// and writes the small outputs (running statistics, Mean/InvStdDev, dscale, dB); one thread per
// element then applies them.
#include <limits>
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

// ---- shared helpers -----------------------------------------------------------------------------
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

// mean[o]: channel o's mean over N and the spatial dims (double): the first pass of BatchNorm's
// statistics, forward and backward.
template <class T>
void bn_means(const T* x, const BnShape& sh, const GpuCtx& c, double* mean) {
  const int64_t s = sh.s, cs = sh.c * sh.s, count = sh.count;
  segmented_reduce(
      c, sh.c, count, 0.0,
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> double {
        return static_cast<double>(x[(j / s) * cs + o * s + j % s]);
      },
      AddD{},
      [=] CB_HOST_DEVICE(int64_t o, double acc) {
        mean[o] = count ? acc / static_cast<double>(count) : 0;
      });
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
    // output 5 (save_batch_norm_statistics): mean, invstd, mul, add [4, C] in f64
    double* o_st = a.out.size() > 5 && a.out[5].present() ? a.out[5].ptr<double>() : nullptr;
    bn_means(x, sh, c, mean);
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
          if (o_st) {
            o_st[o] = mu;
            o_st[ch + o] = 1.0 / math::m_sqrt(v + eps);
            o_st[2 * ch + o] = static_cast<double>(static_cast<T>(m));  // as applied below
            o_st[3 * ch + o] = static_cast<double>(static_cast<T>(bias.at(o) - mu * m));
          }
        });
  } else {
    parallel_for(c, ch, [=] CB_HOST_DEVICE(int64_t o) {
      const double m = scale.at(o) / math::m_sqrt(rvar.at(o) + eps);
      mul[o] = m;
      add[o] = bias.at(o) - rmean.at(o) * m;
    });
  }
  // fused (fuse_batch_norm_relu): ReluOp's max(y, 0) or ClipOp's clamp (as the CPU), after the
  // residual input 5 is added where there is one (params.h's residual)
  const bool relu = p.relu;
  const math::BnActivation act = math::BnActivation::of(p);
  const T* r = p.residual ? a.in.at(5).ptr<T>() : nullptr;
  parallel_for(c, a.in[0].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t k = (i / s) % ch;
    T v = x[i] * static_cast<T>(mul[k]) + static_cast<T>(add[k]);
    if (r) v = v + r[i];
    y[i] = relu ? act.y(v) : v;
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
  // A fused activation's output (fuse_batch_norm_relu): dy counts where act.counts(it) (> 0 for
  // Relu, as ReluGrad masks).
  const T* z = p.relu ? a.in.at(3).ptr<T>() : nullptr;
  const math::BnActivation act = math::BnActivation::of(p);
  T* dx = out_ptr<T>(a, 0);
  const RealOut o_ds = real_out(a, 1), o_db = real_out(a, 2);
  const Real scale = real_of(a.in[2]);
  double* ws = workspace_of<double>(a, c, &bn_grad_workspace, "BatchNormalizationGrad");
  double *mean = ws, *coef = ws + ch;
  const double eps = static_cast<double>(p.epsilon);
  // The forward's statistics where it saved them (input 4: mean, invstd, mul, add [4, C]).
  const double* st = a.in.size() > 4 && a.in[4].present() ? a.in[4].ptr<double>() : nullptr;
  const double* mean_of = st ? st : mean;
  if (!st) bn_means(x, sh, c, mean);
  // Per channel: sum((x - mean)^2), sum(dy), sum(dy * (x - mean)).
  segmented_reduce(
      c, ch, count, Sums3{0, 0, 0},
      [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> Sums3 {
        const int64_t at = (j / s) * cs + o * s + j % s;
        const T gt = !z || act.counts(z[at]) ? dy[at] : T(0);
        const double d = static_cast<double>(x[at]) - mean_of[o], g = static_cast<double>(gt);
        return {d * d, g, g * d};
      },
      AddSums3{},
      [=] CB_HOST_DEVICE(int64_t o, Sums3 acc) {
        const double var = count ? acc.a / static_cast<double>(count) : 0;
        const double invstd = st ? st[ch + o] : 1.0 / math::m_sqrt(var + eps);
        const double sdy = acc.b, sdyx = acc.c * invstd;  // sum(dy * xhat)
        o_db.put(o, sdy);
        o_ds.put(o, sdyx);
        // dx = k * (dy - b - (x - mean) * q), k = scale * invstd (as the CPU)
        const double inv_m = count ? 1.0 / static_cast<double>(count) : 0;
        coef[4 * o] = scale.at(o) * invstd;
        coef[4 * o + 1] = sdy * inv_m;
        coef[4 * o + 2] = invstd * sdyx * inv_m;
        coef[4 * o + 3] = mean_of[o];
      });
  if (!dx) return;
  parallel_for(c, a.in[1].numel(), [=] CB_HOST_DEVICE(int64_t i) {
    const double* k = coef + 4 * ((i / s) % ch);
    const T kk = static_cast<T>(k[0]), b = static_cast<T>(k[1]), q = static_cast<T>(k[2]),
            mu = static_cast<T>(k[3]);
    const T g = !z || act.counts(z[i]) ? dy[i] : T(0);
    dx[i] = kk * (g - b - (x[i] - mu) * q);
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

constexpr GpuKernel kKernels[] = {
    {OpKind::BatchNormalization, &BatchNormalization, kFloat, &bn_workspace},
    {OpKind::BatchNormalizationGrad, &BatchNormalizationGrad, kFloat, &bn_grad_workspace},
    {OpKind::LayerNormalization, &LayerNormalization, kFloat, &ln_workspace},
    {OpKind::LayerNormalizationGrad, &LayerNormalizationGrad, kFloat, &ln_grad_workspace},
};

}  // namespace

std::span<const GpuKernel> norm_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
