// Reductions, softmax and the softmax cross-entropy loss of the CUDA backend (the CPU's
// kernels/cpu/reduce.cpp, softmax.cpp and loss.cpp, same semantics).
//  - Reduce* / ReduceSumTo: the input's dims are collapsed into kept and reduced groups (size-1
//    dims dropped, adjacent dims of one kind merged); output element o (row-major over the kept
//    dims, which is the output's layout with or without keepdims) reduces the input elements
//    kept_offset(o) + reduced_offset(j) in one segmented_reduce. Floats accumulate in double;
//    integers wrap as the CPU's (sums and products in uint64, which wraps like any narrower
//    type, truncated to T at the end). LogSumExp folds (max, sum of exp(x - max)) pairs.
//  - Softmax, LogSoftmax and their gradients: the input viewed as [outer, n, inner] (opset < 13:
//    coerce_2d), rows (outer, inner) reduced into the workspace (max, then sum of exp), then an
//    elementwise write.
//  - SoftmaxCrossEntropyLoss(+Grad): per element row max and sum of exp into the workspace, then
//    the loss (none: elementwise; sum / mean: one segmented_reduce of (loss, weight) pairs, so the
//    mean's divisor is computed on the device) and log_prob, or the gradient (the mean's scale
//    reduced into the workspace first). A label outside [0, C) that is not ignore_index counts
//    as ignored (loss 0, not in the mean's divisor, gradient row 0) and is reported through the
//    stream's error flag (device_error.h), which the device raises as the CPU's error at its next
//    synchronisation. Label smoothing e (no weights): the forward also reduces each
//    element's mean score into the workspace (loss = shift - (1 - e) x[label] - e mean(x)); the
//    gradient subtracts (1 - e) at the label and e / C everywhere (e = 0: the unsmoothed
//    arithmetic).
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cuda/launch.h"
#include "runtime/error.h"
#include "runtime/ops/params.h"

namespace cb::CB_GPU_NS {

namespace {

template <class T>
CB_HOST_DEVICE inline T pos_inf() {
  return std::numeric_limits<T>::infinity();
}

// ================================ Reduce* and ReduceSumTo ========================================
enum class Kind { Sum, Mean, SumSquare, L1, L2, LogSum, LogSumExp, Max, Min, Prod };

constexpr bool float_only(Kind k) {
  return k == Kind::L2 || k == Kind::LogSum || k == Kind::LogSumExp;
}

// The input seen as (kept group, reduced group): input offset of (o, j) =
// offset_of(o, kept, kept_st) + offset_of(j, red, red_st).
struct ReduceGeom {
  Dims kept, kept_st, red, red_st;
  int64_t n_out = 1, n_red = 1;
};

ReduceGeom reduce_geometry(const std::vector<int64_t>& dims, const bool* red) {
  ReduceGeom g;
  if (dims.size() > kMaxRank) fail("reduction: rank {} is more than {}", dims.size(), kMaxRank);
  const int r = static_cast<int>(dims.size());
  int64_t st[kMaxRank];
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= dims[static_cast<size_t>(i)];
  }
  int last = -1;  // 0: kept, 1: reduced (the group of the previous dim that was not 1)
  for (int i = 0; i < r; ++i) {
    const int64_t n = dims[static_cast<size_t>(i)];
    if (red[i])
      g.n_red *= n;
    else
      g.n_out *= n;
    if (n == 1) continue;
    const int kind = red[i] ? 1 : 0;
    Dims& d = kind ? g.red : g.kept;
    Dims& s = kind ? g.red_st : g.kept_st;
    if (last == kind) {  // contiguous with the previous dim of the group: merge
      d.d[d.rank - 1] *= n;
      s.d[s.rank - 1] = st[i];
    } else {
      d.d[d.rank] = n;
      s.d[s.rank] = st[i];
      ++d.rank;
      ++s.rank;
    }
    last = kind;
  }
  return g;
}

// The accumulator of (T, K) and its operations: identity, an element's term, the combination and
// the finish into T (count: the reduced element count).
template <class T, Kind K, bool Int = !math::kIsFloat<T>>
struct Policy;

// Floats: double sums / products, NaN-propagating max / min in T.
template <class T, Kind K>
struct Policy<T, K, false> {
  static constexpr bool kExt = K == Kind::Max || K == Kind::Min;
  using Acc = std::conditional_t<kExt, T, double>;
  CB_HOST_DEVICE static Acc init() {
    if constexpr (K == Kind::Max)
      return -pos_inf<T>();
    else if constexpr (K == Kind::Min)
      return pos_inf<T>();
    else if constexpr (K == Kind::Prod)
      return 1.0;
    else
      return 0.0;
  }
  CB_HOST_DEVICE static Acc term(T x) {
    if constexpr (K == Kind::SumSquare || K == Kind::L2)
      return double(x) * double(x);
    else if constexpr (K == Kind::L1)
      return x < T(0) ? -double(x) : double(x);
    else
      return Acc(x);
  }
  CB_HOST_DEVICE static Acc comb(Acc u, Acc v) {
    if constexpr (K == Kind::Max)
      return v > u || math::is_nan(v) ? v : u;
    else if constexpr (K == Kind::Min)
      return v < u || math::is_nan(v) ? v : u;
    else if constexpr (K == Kind::Prod)
      return u * v;
    else
      return u + v;
  }
  CB_HOST_DEVICE static T finish(Acc y, int64_t count) {
    if constexpr (K == Kind::Mean)
      return count > 0 ? T(y / double(count)) : T(y);
    else if constexpr (K == Kind::L2)
      return T(math::m_sqrt(y));
    else if constexpr (K == Kind::LogSum)
      return T(math::m_log(y));
    else
      return T(y);
  }
};

// Integers (Sum, Mean, SumSquare, L1, Prod, Max, Min): sums and products wrap (uint64, cast to T).
template <class T, Kind K>
struct Policy<T, K, true> {
  static_assert(!float_only(K));
  static constexpr bool kExt = K == Kind::Max || K == Kind::Min;
  using Acc = std::conditional_t<kExt, T, uint64_t>;
  CB_HOST_DEVICE static Acc init() {
    if constexpr (K == Kind::Max)
      return std::numeric_limits<T>::lowest();
    else if constexpr (K == Kind::Min)
      return std::numeric_limits<T>::max();
    else if constexpr (K == Kind::Prod)
      return 1;
    else
      return 0;
  }
  CB_HOST_DEVICE static Acc term(T x) {
    if constexpr (kExt)
      return x;
    else if constexpr (K == Kind::SumSquare)
      return static_cast<uint64_t>(x) * static_cast<uint64_t>(x);
    else if constexpr (K == Kind::L1 && std::is_signed_v<T>)
      return x < T(0) ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    else
      return static_cast<uint64_t>(x);
  }
  CB_HOST_DEVICE static Acc comb(Acc u, Acc v) {
    if constexpr (K == Kind::Max)
      return v > u ? v : u;
    else if constexpr (K == Kind::Min)
      return v < u ? v : u;
    else if constexpr (K == Kind::Prod)
      return u * v;
    else
      return u + v;
  }
  CB_HOST_DEVICE static T finish(Acc y, int64_t count) {
    const T v = static_cast<T>(y);
    if constexpr (K == Kind::Mean) {  // the CPU's T(y / T(count)) on the wrapped sum
      const T n = static_cast<T>(count);
      return count > 0 && n != T(0) ? static_cast<T>(v / n) : v;
    } else {
      return v;
    }
  }
};

// LogSumExp: (max, sum of exp(x - max)) pairs; NaN wins, +inf wins, -inf adds nothing.
struct Lse {
  double m, s;
};
template <class T>
struct Policy<T, Kind::LogSumExp, false> {
  using Acc = Lse;
  CB_HOST_DEVICE static Acc init() { return {-pos_inf<double>(), 0.0}; }
  CB_HOST_DEVICE static Acc term(T x) { return {double(x), 1.0}; }
  CB_HOST_DEVICE static Acc comb(Acc u, Acc v) {
    if (math::is_nan(u.m)) return u;
    if (math::is_nan(v.m)) return v;
    if (u.m < v.m) {
      const Acc t = u;
      u = v;
      v = t;
    }
    if (v.m == -pos_inf<double>() || u.m == pos_inf<double>()) return u;
    return {u.m, u.s + v.s * math::m_exp(v.m - u.m)};
  }
  CB_HOST_DEVICE static T finish(Acc y, int64_t) {
    if (math::is_nan(y.m) || y.m == pos_inf<double>() || y.m == -pos_inf<double>()) return T(y.m);
    return T(y.m + math::m_log(y.s));
  }
};

template <Kind K>
struct Reduce {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const ReduceGeom& geom) {
    using P = Policy<T, K>;
    using Acc = typename P::Acc;
    const T* x = a.in[0].ptr<const T>();
    T* y = a.out[0].ptr<T>();
    const ReduceGeom g = geom;
    const int64_t count = g.n_red;
    segmented_reduce(
        c, g.n_out, g.n_red, P::init(),
        [=] CB_HOST_DEVICE(int64_t o, int64_t j) -> Acc {
          return P::term(x[offset_of(o, g.kept, g.kept_st) + offset_of(j, g.red, g.red_st)]);
        },
        [=] CB_HOST_DEVICE(Acc u, Acc v) -> Acc { return P::comb(u, v); },
        [=] CB_HOST_DEVICE(int64_t o, Acc acc) { y[o] = P::finish(acc, count); });
  }
};

template <Kind K>
void reduce_with(const KernelArgs& a, const GpuCtx& c, const bool* red, const char* name) {
  const ReduceGeom g = reduce_geometry(a.in[0].dims, red);
  if constexpr (float_only(K)) {
    CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, name, Reduce<K>::template run, a, c, g)
  } else {
    CB_GPU_DISPATCH_NUMERIC(a.in[0].dtype, name, Reduce<K>::template run, a, c, g)
  }
}

// Reduce* over the axes infer() resolved (ReduceParams::reduced; all false: noop).
template <Kind K>
void reduce_op(const KernelArgs& a, const GpuCtx& c, const char* name) {
  const auto& p = a.p<ops::ReduceParams>();
  const auto r = static_cast<size_t>(a.in[0].rank());
  if (p.reduced.size() != r)
    fail("{}: the reduced axes ({} flags) were not resolved for rank {}", name, p.reduced.size(),
         r);
  bool red[kMaxRank] = {};
  for (size_t i = 0; i < r && i < kMaxRank; ++i) red[i] = p.reduced[i];
  reduce_with<K>(a, c, red, name);
}

void ReduceSum(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::Sum>(a, c, "ReduceSum"); }
void ReduceMean(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::Mean>(a, c, "ReduceMean"); }
void ReduceSumSquare(const KernelArgs& a, const GpuCtx& c) {
  reduce_op<Kind::SumSquare>(a, c, "ReduceSumSquare");
}
void ReduceL1(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::L1>(a, c, "ReduceL1"); }
void ReduceL2(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::L2>(a, c, "ReduceL2"); }
void ReduceLogSum(const KernelArgs& a, const GpuCtx& c) {
  reduce_op<Kind::LogSum>(a, c, "ReduceLogSum");
}
void ReduceLogSumExp(const KernelArgs& a, const GpuCtx& c) {
  reduce_op<Kind::LogSumExp>(a, c, "ReduceLogSumExp");
}
void ReduceMax(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::Max>(a, c, "ReduceMax"); }
void ReduceMin(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::Min>(a, c, "ReduceMin"); }
void ReduceProd(const KernelArgs& a, const GpuCtx& c) { reduce_op<Kind::Prod>(a, c, "ReduceProd"); }

// ReduceSumTo(x [d...], shape) -> [t...]: sums the dims broadcasting added (leading) or stretched
// (t_i == 1 < d_i).
void ReduceSumTo(const KernelArgs& a, const GpuCtx& c) {
  const TensorView &in = a.in[0], &out = a.out[0];
  const int64_t r = in.rank(), shift = r - out.rank();
  if (in.dims.size() > kMaxRank || shift < 0)
    fail("ReduceSumTo: cannot sum rank {} down to rank {}", r, out.rank());
  bool red[kMaxRank] = {};
  for (int64_t d = 0; d < r; ++d)
    red[d] = d < shift || (out.dims[static_cast<size_t>(d - shift)] == 1 &&
                           in.dims[static_cast<size_t>(d)] != 1);
  reduce_with<Kind::Sum>(a, c, red, "ReduceSumTo");
}

// ================================ Softmax, LogSoftmax and gradients ==============================
// dims viewed as [outer, n, inner] (kernels/cpu/softmax.cpp); rows = outer * inner.
using SmView = geom::SoftmaxView;
SmView sm_view(const KernelArgs& a, const std::vector<int64_t>& d) {
  return geom::softmax_view(a.p<ops::SoftmaxParams>(), d);
}
int64_t numel_of(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// Workspace: per row its max, then log(sum) (LogSoftmax) or 1/sum (Softmax), as doubles.
size_t softmax_ws(const KernelArgs& a, const GpuCtx&) {
  if (numel_of(a.in[0].dims) == 0) return 0;
  return static_cast<size_t>(sm_view(a, a.in[0].dims).rows()) * 2 * sizeof(double);
}
// Workspace: per row sum(dy y) (Softmax) or sum(dy) (LogSoftmax).
size_t softmax_grad_ws(const KernelArgs& a, const GpuCtx&) {
  if (numel_of(a.in[1].dims) == 0) return 0;
  return static_cast<size_t>(sm_view(a, a.in[1].dims).rows()) * sizeof(double);
}

void need_workspace(const KernelArgs& a, size_t bytes, const char* op) {
  if (a.workspace_bytes < bytes || (bytes > 0 && !a.workspace))
    fail("{}: workspace of {} bytes given, {} needed", op, a.workspace_bytes, bytes);
}

template <bool Log>
struct SoftmaxFwd {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const SmView& v) {
    const int64_t n = v.n, inner = v.inner, rows = v.rows(), total = a.in[0].numel();
    const T* x = a.in[0].ptr<const T>();
    T* y = a.out[0].ptr<T>();
    double* mx = static_cast<double*>(a.workspace);
    double* sm = mx + rows;
    // element k of row r: x[(r / inner) * n * inner + k * inner + r % inner]
    segmented_reduce(
        c, rows, n, -pos_inf<T>(),
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> T {
          return x[(r / inner) * n * inner + k * inner + r % inner];
        },
        [=] CB_HOST_DEVICE(T u, T w) -> T { return u < w ? w : u; },  // std::max: NaN skipped
        [=] CB_HOST_DEVICE(int64_t r, T m) { mx[r] = double(m); });
    segmented_reduce(
        c, rows, n, 0.0,
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> double {
          const T m = T(mx[r]);
          return double(
              math::m_exp(static_cast<T>(x[(r / inner) * n * inner + k * inner + r % inner] - m)));
        },
        [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
        [=] CB_HOST_DEVICE(int64_t r, double s) { sm[r] = Log ? math::m_log(s) : 1.0 / s; });
    parallel_for(c, total, [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t r = (i / (n * inner)) * inner + i % inner;
      const T m = T(mx[r]);
      if (Log) {
        const T shift = static_cast<T>(double(m) + sm[r]);
        y[i] = static_cast<T>(x[i] - shift);
      } else {
        const T e = math::m_exp(static_cast<T>(x[i] - m));
        y[i] = static_cast<T>(double(e) * sm[r]);
      }
    });
  }
};

template <bool Log>
void softmax_op(const KernelArgs& a, const GpuCtx& c, const char* name) {
  if (a.in[0].numel() == 0) return;
  need_workspace(a, softmax_ws(a, c), name);
  const SmView v = sm_view(a, a.in[0].dims);
  CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, name, SoftmaxFwd<Log>::template run, a, c, v)
}
void Softmax(const KernelArgs& a, const GpuCtx& c) { softmax_op<false>(a, c, "Softmax"); }
void LogSoftmax(const KernelArgs& a, const GpuCtx& c) { softmax_op<true>(a, c, "LogSoftmax"); }

// (dY, Y) -> dX: Softmax dx = y (dy - sum(dy y)); LogSoftmax dx = dy - exp(y) sum(dy).
template <bool Log>
struct SoftmaxBwd {
  template <class T>
  static void run(const KernelArgs& a, const GpuCtx& c, const SmView& v) {
    const int64_t n = v.n, inner = v.inner, rows = v.rows(), total = a.in[1].numel();
    const T* dy = a.in[0].ptr<const T>();
    const T* y = a.in[1].ptr<const T>();
    T* dx = a.out[0].ptr<T>();
    double* sum = static_cast<double*>(a.workspace);
    segmented_reduce(
        c, rows, n, 0.0,
        [=] CB_HOST_DEVICE(int64_t r, int64_t k) -> double {
          const int64_t i = (r / inner) * n * inner + k * inner + r % inner;
          if (Log)
            return double(dy[i]);
          else
            return double(dy[i]) * double(y[i]);
        },
        [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
        [=] CB_HOST_DEVICE(int64_t r, double s) { sum[r] = s; });
    parallel_for(c, total, [=] CB_HOST_DEVICE(int64_t i) {
      const double s = sum[(i / (n * inner)) * inner + i % inner];
      if (Log)
        dx[i] = static_cast<T>(double(dy[i]) - double(math::m_exp(y[i])) * s);
      else
        dx[i] = static_cast<T>(double(y[i]) * (double(dy[i]) - s));
    });
  }
};

template <bool Log>
void softmax_grad_op(const KernelArgs& a, const GpuCtx& c, const char* name) {
  if (a.in[1].numel() == 0) return;
  need_workspace(a, softmax_grad_ws(a, c), name);
  const SmView v = sm_view(a, a.in[1].dims);
  CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, name, SoftmaxBwd<Log>::template run, a, c, v)
}
void SoftmaxGrad(const KernelArgs& a, const GpuCtx& c) {
  softmax_grad_op<false>(a, c, "SoftmaxGrad");
}
void LogSoftmaxGrad(const KernelArgs& a, const GpuCtx& c) {
  softmax_grad_op<true>(a, c, "LogSoftmaxGrad");
}

// ================================ SoftmaxCrossEntropyLoss (+Grad) ================================
using Reduction = ops::SoftmaxCrossEntropyLossParams::Reduction;

// scores [N,C,d1..dk]: n samples, c classes, d positions per sample (the class stride), m = n*d
// labelled elements; element p's class k is at (p / d) * c * d + p % d + k * d.
struct SceGeom {
  int64_t n = 0, c = 0, d = 1, m = 0;
  bool has_ignore = false;
  int64_t ignore = 0;
  Reduction red = Reduction::Mean;
  double eps = 0;  // label smoothing
};
SceGeom sce_geom(const KernelArgs& a, const TensorView& scores) {
  if (scores.rank() < 2) fail("SoftmaxCrossEntropyLoss: scores must have rank >= 2");
  const auto& p = a.p<ops::SoftmaxCrossEntropyLossParams>();
  SceGeom g;
  g.n = scores.dims[0];
  g.c = scores.dims[1];
  for (size_t k = 2; k < scores.dims.size(); ++k) g.d *= scores.dims[k];
  g.m = g.n * g.d;
  g.has_ignore = p.ignore_index.has_value();
  g.ignore = p.ignore_index.value_or(0);
  g.red = p.reduction;
  g.eps = p.label_smoothing;
  return g;
}

// Workspace: per element its max and (forward) its shift max + log(sum) or (gradient) its sum,
// then (forward, label smoothing) its mean score or (gradient) the mean's scale, all doubles.
size_t sce_ws(const KernelArgs& a, const GpuCtx&) {
  const SceGeom g = sce_geom(a, a.in[0]);
  return static_cast<size_t>(g.m) * (g.eps > 0 ? 3 : 2) * sizeof(double);
}
size_t sce_grad_ws(const KernelArgs& a, const GpuCtx&) {
  const SceGeom g = sce_geom(a, a.in[1]);
  return (static_cast<size_t>(g.m) * 2 + 1) * sizeof(double);
}

// Element p's label and weight: 0 weight where ignored or out of range (not ignored).
template <class T, class L>
struct Labels {
  const L* lab;
  const T* w;  // nullptr: weight 1
  int64_t c;
  bool has_ignore;
  int64_t ignore;
  DeviceErrorFlag err;
  CB_HOST_DEVICE int64_t label(int64_t p) const { return static_cast<int64_t>(lab[p]); }
  CB_HOST_DEVICE bool ignored(int64_t l) const { return has_ignore && l == ignore; }
  CB_HOST_DEVICE bool bad(int64_t l) const { return l < 0 || l >= c; }
  // Reports element p's bad label l (the first report since the flag was cleared wins).
  CB_HOST_DEVICE void report(int64_t p, int64_t l) const {
    raise_device_error(err, DeviceErrorCode::Label, l, p, c);
  }
  // w[l] (1 without weights) for a label that is neither ignored nor out of range.
  CB_HOST_DEVICE double weight_of(int64_t l) const { return w ? double(w[l]) : 1.0; }
  // The mean's divisor term.
  CB_HOST_DEVICE double divisor_term(int64_t p) const {
    const int64_t l = label(p);
    if (ignored(l) || bad(l)) return 0.0;
    return weight_of(l);
  }
};

// Row max into mx[p] and sum of exp(x - max) into sum[p] (shift: store max + log(sum)).
template <class T>
void sce_rows(const GpuCtx& c, const SceGeom& g, const T* x, double* mx, double* sum, bool shift) {
  const int64_t cc = g.c, d = g.d;
  segmented_reduce(
      c, g.m, cc, -pos_inf<T>(),
      [=] CB_HOST_DEVICE(int64_t p, int64_t k) -> T { return x[(p / d) * cc * d + p % d + k * d]; },
      [=] CB_HOST_DEVICE(T u, T w) -> T { return u < w ? w : u; },  // std::max
      [=] CB_HOST_DEVICE(int64_t p, T m) { mx[p] = double(m); });
  segmented_reduce(
      c, g.m, cc, 0.0,
      [=] CB_HOST_DEVICE(int64_t p, int64_t k) -> double {
        const T m = T(mx[p]);
        return double(math::m_exp(static_cast<T>(x[(p / d) * cc * d + p % d + k * d] - m)));
      },
      [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
      [=] CB_HOST_DEVICE(int64_t p, double s) { sum[p] = shift ? mx[p] + math::m_log(s) : s; });
}

// Element p's loss: (shift - x[label]) * w[label], or with label smoothing e (no weights)
// shift - (1 - e) x[label] - e mean[p]; 0 where ignored or out of range (reported).
template <class T, class L>
struct SceLoss {
  Labels<T, L> lb;
  const T* x;
  const double* shift;
  const double* mean;  // per element mean score (label smoothing only)
  double eps;
  int64_t c, d;
  CB_HOST_DEVICE double operator()(int64_t p) const {
    const int64_t l = lb.label(p);
    if (lb.ignored(l)) return 0.0;
    if (lb.bad(l)) {
      lb.report(p, l);
      return 0.0;
    }
    const double xl = double(x[(p / d) * c * d + p % d + l * d]);
    if (eps > 0) return shift[p] - (1 - eps) * xl - eps * mean[p];
    return (shift[p] - xl) * lb.weight_of(l);
  }
};

struct LossAcc {
  double loss, weight;
};

template <class T, class L>
void sce_fwd(const KernelArgs& a, const GpuCtx& c, const SceGeom& g) {
  const T* x = a.in[0].ptr<const T>();
  const T* w = a.in.size() > 2 && a.in[2].present() ? a.in[2].ptr<const T>() : nullptr;
  const Labels<T, L> lb{a.in[1].ptr<const L>(), w, g.c, g.has_ignore, g.ignore, c.error};
  T* y = a.out[0].ptr<T>();
  T* lp = a.out.size() > 1 && a.out[1].present() ? a.out[1].ptr<T>() : nullptr;
  double* mx = static_cast<double*>(a.workspace);
  double* shift = mx + g.m;
  sce_rows<T>(c, g, x, mx, shift, true);
  const int64_t cc = g.c, d = g.d;
  double* mean = nullptr;
  if (g.eps > 0) {
    mean = shift + g.m;
    segmented_reduce(
        c, g.m, cc, 0.0,
        [=] CB_HOST_DEVICE(int64_t p, int64_t k) -> double {
          return double(x[(p / d) * cc * d + p % d + k * d]);
        },
        [=] CB_HOST_DEVICE(double u, double w) -> double { return u + w; },
        [=] CB_HOST_DEVICE(int64_t p, double s) { mean[p] = s / double(cc); });
  }
  const SceLoss<T, L> loss{lb, x, shift, mean, g.eps, cc, d};
  if (g.red == Reduction::None) {
    parallel_for(c, g.m, [=] CB_HOST_DEVICE(int64_t p) { y[p] = static_cast<T>(loss(p)); });
  } else {
    const bool mean = g.red == Reduction::Mean;
    segmented_reduce(
        c, 1, g.m, LossAcc{0.0, 0.0},
        [=] CB_HOST_DEVICE(int64_t, int64_t p) -> LossAcc {
          return {loss(p), lb.divisor_term(p)};
        },
        [=] CB_HOST_DEVICE(LossAcc u, LossAcc v) -> LossAcc {
          return {u.loss + v.loss, u.weight + v.weight};
        },
        [=] CB_HOST_DEVICE(int64_t, LossAcc t) {
          y[0] = static_cast<T>(mean ? t.loss / t.weight : t.loss);
        });
  }
  if (lp)
    parallel_for(c, g.n * cc * d, [=] CB_HOST_DEVICE(int64_t i) {
      const int64_t p = (i / (cc * d)) * d + i % d;
      lp[i] = static_cast<T>(double(x[i]) - shift[p]);
    });
}

template <class T, class L>
void sce_bwd(const KernelArgs& a, const GpuCtx& c, const SceGeom& g) {
  const T* dl = a.in[0].ptr<const T>();
  const T* x = a.in[1].ptr<const T>();
  const T* w = a.in.size() > 3 && a.in[3].present() ? a.in[3].ptr<const T>() : nullptr;
  const Labels<T, L> lb{a.in[2].ptr<const L>(), w, g.c, g.has_ignore, g.ignore, c.error};
  T* dx = a.out[0].ptr<T>();
  double* mx = static_cast<double*>(a.workspace);
  double* sum = mx + g.m;
  double* scale = sum + g.m;  // 1 / the mean's divisor
  sce_rows<T>(c, g, x, mx, sum, false);
  const bool mean = g.red == Reduction::Mean, none = g.red == Reduction::None;
  if (mean)
    segmented_reduce(
        c, 1, g.m, 0.0,
        [=] CB_HOST_DEVICE(int64_t, int64_t p) -> double { return lb.divisor_term(p); },
        [=] CB_HOST_DEVICE(double u, double v) -> double { return u + v; },
        [=] CB_HOST_DEVICE(int64_t, double s) { scale[0] = 1.0 / s; });
  const int64_t cc = g.c, d = g.d;
  const double eps = g.eps, u = g.eps / double(g.c);  // u: the uniform part of the target
  parallel_for(c, g.n * cc * d, [=] CB_HOST_DEVICE(int64_t i) {
    const int64_t q = i / (cc * d), rem = i % (cc * d), k = rem / d;
    const int64_t p = q * d + rem % d;
    const int64_t l = lb.label(p);
    if (lb.ignored(l)) {
      dx[i] = T(0);
      return;
    }
    if (lb.bad(l)) {
      if (k == 0) lb.report(p, l);
      dx[i] = T(0);
      return;
    }
    const double gr = double(dl[none ? p : 0]) * (mean ? scale[0] : 1.0) * lb.weight_of(l);
    const T e = math::m_exp(static_cast<T>(x[i] - T(mx[p])));
    if (eps > 0)
      dx[i] = static_cast<T>((double(e) / sum[p] - (k == l ? 1 - eps : 0.0) - u) * gr);
    else if (k == l)
      dx[i] = static_cast<T>((double(e) / sum[p] - 1.0) * gr);
    else
      dx[i] = static_cast<T>(double(e) * (gr / sum[p]));
  });
}

// Calls Fn<T, L> with L the labels' integer type.
template <class T>
void sce_fwd_t(const KernelArgs& a, const GpuCtx& c, const SceGeom& g) {
  switch (a.in[1].dtype) {
    case DType::I64:
      return sce_fwd<T, int64_t>(a, c, g);
    case DType::I32:
      return sce_fwd<T, int32_t>(a, c, g);
    case DType::I8:
      return sce_fwd<T, int8_t>(a, c, g);
    case DType::U8:
      return sce_fwd<T, uint8_t>(a, c, g);
    default:
      fail("SoftmaxCrossEntropyLoss: labels of type {}", dtype_name(a.in[1].dtype));
  }
}
template <class T>
void sce_bwd_t(const KernelArgs& a, const GpuCtx& c, const SceGeom& g) {
  switch (a.in[2].dtype) {
    case DType::I64:
      return sce_bwd<T, int64_t>(a, c, g);
    case DType::I32:
      return sce_bwd<T, int32_t>(a, c, g);
    case DType::I8:
      return sce_bwd<T, int8_t>(a, c, g);
    case DType::U8:
      return sce_bwd<T, uint8_t>(a, c, g);
    default:
      fail("SoftmaxCrossEntropyLossGrad: labels of type {}", dtype_name(a.in[2].dtype));
  }
}

// SoftmaxCrossEntropyLoss(scores [N,C,d1..dk], labels [N,d1..dk], weights? [C]) -> loss ([] or
// [N,d1..dk]), log_prob? [N,C,d1..dk]
void SoftmaxCrossEntropyLoss(const KernelArgs& a, const GpuCtx& c) {
  const SceGeom g = sce_geom(a, a.in[0]);
  if (a.in[1].numel() != g.m) fail("SoftmaxCrossEntropyLoss: labels do not match the scores");
  need_workspace(a, sce_ws(a, c), "SoftmaxCrossEntropyLoss");
  CB_GPU_DISPATCH_FLOAT(a.in[0].dtype, "SoftmaxCrossEntropyLoss", sce_fwd_t, a, c, g)
}

// SoftmaxCrossEntropyLossGrad(dloss ([] or [N,d1..dk]), scores, labels, weights?) -> dscores
void SoftmaxCrossEntropyLossGrad(const KernelArgs& a, const GpuCtx& c) {
  const SceGeom g = sce_geom(a, a.in[1]);
  if (a.in[2].numel() != g.m) fail("SoftmaxCrossEntropyLossGrad: labels do not match the scores");
  need_workspace(a, sce_grad_ws(a, c), "SoftmaxCrossEntropyLossGrad");
  CB_GPU_DISPATCH_FLOAT(a.in[1].dtype, "SoftmaxCrossEntropyLossGrad", sce_bwd_t, a, c, g)
}

constexpr GpuKernel kKernels[] = {
    {OpKind::ReduceL1, &ReduceL1, kNumeric},
    {OpKind::ReduceL2, &ReduceL2, kFloat},
    {OpKind::ReduceLogSum, &ReduceLogSum, kFloat},
    {OpKind::ReduceLogSumExp, &ReduceLogSumExp, kFloat},
    {OpKind::ReduceMax, &ReduceMax, kNumeric},
    {OpKind::ReduceMean, &ReduceMean, kNumeric},
    {OpKind::ReduceMin, &ReduceMin, kNumeric},
    {OpKind::ReduceProd, &ReduceProd, kNumeric},
    {OpKind::ReduceSum, &ReduceSum, kNumeric},
    {OpKind::ReduceSumSquare, &ReduceSumSquare, kNumeric},
    {OpKind::ReduceSumTo, &ReduceSumTo, kNumeric},
    {OpKind::Softmax, &Softmax, kFloat, &softmax_ws},
    {OpKind::LogSoftmax, &LogSoftmax, kFloat, &softmax_ws},
    {OpKind::SoftmaxGrad, &SoftmaxGrad, kFloat, &softmax_grad_ws},
    {OpKind::LogSoftmaxGrad, &LogSoftmaxGrad, kFloat, &softmax_grad_ws},
    {OpKind::SoftmaxCrossEntropyLoss, &SoftmaxCrossEntropyLoss, kFloat, &sce_ws},
    {OpKind::SoftmaxCrossEntropyLossGrad, &SoftmaxCrossEntropyLossGrad, kFloat, &sce_grad_ws},
};
}  // namespace

std::span<const GpuKernel> reduce_kernels() { return kKernels; }

}  // namespace cb::CB_GPU_NS
