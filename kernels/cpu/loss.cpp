// SoftmaxCrossEntropyLoss and its gradient, on scores [N,C,d1..dk] (f32/f64), labels [N,d1..dk]
// (integers) and optional class weights [C].
// Forward, per element (sample i, position j): the numerically stable log-softmax over the
// classes lp = x - (max + log sum exp(x - max)) (exp in T, the sum and the log in double),
// loss = -w[label] * lp[label] (w = 1 without weights); reduction mean (sum / the sum of w[label]
// over the elements not ignored: their count without weights), sum, or none ([N,d1..dk]);
// log_prob [N,C,d1..dk] = lp when the node asks for it.
// Gradient: dscores[i,c,j] = (softmax(x_ij)[c] - [c == label_ij]) * w[label_ij] * g_ij with
// g = dloss (sum), dloss / divisor (mean), dloss[i,j] (none).
// Elements labelled ignore_index add nothing: loss 0, gradient 0, not counted by the mean.
// Label smoothing e (no weights; PyTorch's): loss = shift - (1 - e) * x[label] - e * mean(x)
// (= (1 - e) * nll + e * mean of -lp), dscores = (softmax - (1 - e) * [c == label] - e / C) * g.
// With e = 0 the arithmetic is the unsmoothed one, bit for bit.
// Labels are user data: one outside [0, C) (and not ignore_index) is a cb::Error naming it and C,
// raised before any work (never a read out of bounds). Elements are independent and go to the
// thread pool; mean and sum add the per-element losses in order afterwards, so the result does
// not depend on the split.
// Two paths: [N,C] scores without weights (the trainer's classification loss, the hot path:
// contiguous rows) and the general one (class dim strided by d1*..*dk, weights).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/common/kernel_errors.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using Reduction = ops::SoftmaxCrossEntropyLossParams::Reduction;

Reduction reduction_of(const KernelArgs& a) {
  return a.p<ops::SoftmaxCrossEntropyLossParams>().reduction;
}

// Label types: the integer dtypes infer() accepts.
template <class F>
void dispatch_label(DType t, F&& f) {
  switch (t) {
    case DType::I64:
      return f(Tag<int64_t>{});
    case DType::I32:
      return f(Tag<int32_t>{});
    case DType::I8:
      return f(Tag<int8_t>{});
    case DType::U8:
      return f(Tag<uint8_t>{});
    default:
      throw InternalError(fmt::format("SoftmaxCrossEntropyLoss: labels of type {}", dtype_name(t)));
  }
}

// labels [n] (flattened [N,d1..dk]) must be class indices in [0, c) or the ignored label; returns
// how many are not ignored (the divisor of the mean without weights).
template <class L>
int64_t check_labels(const L* labels, int64_t n, int64_t c, std::optional<int64_t> ignore) {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto l = static_cast<int64_t>(labels[i]);
    if (ignore && l == *ignore) continue;
    ++counted;
    if (l < 0 || l >= c) throw Error(label_out_of_range(l, i, c));
  }
  return counted;
}

// One row x [c]: its max (into mx) and log(sum(exp(x - mx))).
template <class T>
double log_sum_exp(const T* x, int64_t c, T& mx) {
  mx = -std::numeric_limits<T>::infinity();
  for (int64_t k = 0; k < c; ++k) mx = std::max(mx, x[k]);
  double sum = 0;
  for (int64_t k = 0; k < c; ++k) sum += math::m_exp(static_cast<T>(x[k] - mx));
  return std::log(sum);
}

// The mean of c values `stride` apart, in double (label smoothing's uniform target).
template <class T>
double row_mean(const T* x, int64_t c, int64_t stride = 1) {
  double sum = 0;
  for (int64_t k = 0; k < c; ++k) sum += static_cast<double>(x[k * stride]);
  return sum / static_cast<double>(c);
}

// The fast path: scores [N,C], labels [N], no weights -> loss ([] for mean/sum, [N] for none),
// log_prob? [N,C]
void sce_rows(const KernelArgs& a) {
  const TensorView &scores = a.in[0], &labels = a.in[1], &loss = a.out[0];
  const TensorView* log_prob = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  CB_CHECK(scores.rank() == 2 && labels.numel() == scores.dims[0]);
  const int64_t n = scores.dims[0], c = scores.dims[1];
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
  const double eps = a.p<ops::SoftmaxCrossEntropyLossParams>().label_smoothing;
  dispatch_label(labels.dtype, [&]<class L>(Tag<L>) {
    const L* lab = labels.ptr<const L>();
    const int64_t counted = check_labels(lab, n, c, ignore);
    dispatch_float(scores.dtype, [&]<class T>(Tag<T>) {
      const T* x = scores.ptr<const T>();
      T* lp = log_prob ? log_prob->ptr<T>() : nullptr;
      T* y = loss.ptr<T>();
      std::vector<double> rows(red == Reduction::None ? 0 : static_cast<size_t>(n));
      parallel(n, c * 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T* xi = x + i * c;
          T mx;
          const double lse = log_sum_exp(xi, c, mx);
          const double shift = static_cast<double>(mx) + lse;  // lp = x - shift
          const auto label = static_cast<int64_t>(lab[i]);
          double li = 0;
          if (!(ignore && label == *ignore))
            li = eps > 0
                     ? shift - (1 - eps) * static_cast<double>(xi[label]) - eps * row_mean(xi, c)
                     : shift - static_cast<double>(xi[label]);
          if (red == Reduction::None)
            y[i] = static_cast<T>(li);
          else
            rows[static_cast<size_t>(i)] = li;
          if (lp)
            for (int64_t k = 0; k < c; ++k)
              lp[i * c + k] = static_cast<T>(static_cast<double>(xi[k]) - shift);
        }
      });
      if (red == Reduction::None) return;
      double total = 0;
      for (double v : rows) total += v;
      y[0] = static_cast<T>(red == Reduction::Mean ? total / static_cast<double>(counted) : total);
    });
  });
}

// The fast path: dloss ([] or [N]), scores [N,C], labels [N], no weights -> dscores [N,C]
void sce_rows_grad(const KernelArgs& a) {
  const TensorView &dloss = a.in[0], &scores = a.in[1], &labels = a.in[2], &dx = a.out[0];
  CB_CHECK(scores.rank() == 2 && labels.numel() == scores.dims[0]);
  const int64_t n = scores.dims[0], c = scores.dims[1];
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
  const double eps = a.p<ops::SoftmaxCrossEntropyLossParams>().label_smoothing;
  dispatch_label(labels.dtype, [&]<class L>(Tag<L>) {
    const L* lab = labels.ptr<const L>();
    const int64_t counted = check_labels(lab, n, c, ignore);
    dispatch_float(scores.dtype, [&]<class T>(Tag<T>) {
      const T* x = scores.ptr<const T>();
      const T* dl = dloss.ptr<const T>();
      T* g = dx.ptr<T>();
      const double scale = red == Reduction::Mean ? 1.0 / static_cast<double>(counted) : 1.0;
      parallel(n, c * 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T* xi = x + i * c;
          T* gi = g + i * c;
          const auto label = static_cast<int64_t>(lab[i]);
          if (ignore && label == *ignore) {
            std::fill(gi, gi + c, T(0));
            continue;
          }
          const double gr = static_cast<double>(dl[red == Reduction::None ? i : 0]) * scale;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t k = 0; k < c; ++k) mx = std::max(mx, xi[k]);
          double sum = 0;
          for (int64_t k = 0; k < c; ++k) {
            T ek = math::m_exp(static_cast<T>(xi[k] - mx));
            gi[k] = ek;
            sum += ek;
          }
          const double p = static_cast<double>(math::m_exp(static_cast<T>(xi[label] - mx))) / sum;
          if (eps > 0) {
            const double u = eps / static_cast<double>(c);  // the uniform part of the target
            for (int64_t k = 0; k < c; ++k)
              gi[k] = static_cast<T>((static_cast<double>(gi[k]) / sum - u) * gr);
            gi[label] = static_cast<T>((p - (1 - eps) - u) * gr);
            continue;
          }
          const double f = gr / sum;  // softmax_k * g = e_k * (g / sum)
          for (int64_t k = 0; k < c; ++k) gi[k] = static_cast<T>(static_cast<double>(gi[k]) * f);
          gi[label] = static_cast<T>((p - 1.0) * gr);
        }
      });
    });
  });
}

// The general path's view of scores [N,C,d1..dk]: n samples, c classes, d = d1*..*dk positions
// per sample (the class stride); m = n*d elements, each labelled.
struct Layout {
  int64_t n, c, d, m;
};
Layout layout_of(const TensorView& scores, const TensorView& labels) {
  Layout l{scores.dims[0], scores.dims[1], 1, 0};
  for (size_t k = 2; k < scores.dims.size(); ++k) l.d *= scores.dims[k];
  l.m = l.n * l.d;
  CB_CHECK(labels.numel() == l.m);
  return l;
}
const TensorView* weights_of(const KernelArgs& a, size_t i) {
  return a.in.size() > i && a.in[i].present() ? &a.in[i] : nullptr;
}

// Checks labels [m] like check_labels; returns the mean's divisor: the sum of w[label] over the
// elements not ignored (their count when w is null).
template <class L, class T>
double weight_sum(const L* labels, int64_t m, int64_t c, std::optional<int64_t> ignore,
                  const T* w) {
  const int64_t counted = check_labels(labels, m, c, ignore);
  if (!w) return static_cast<double>(counted);
  double sum = 0;
  for (int64_t i = 0; i < m; ++i) {
    auto l = static_cast<int64_t>(labels[i]);
    if (!(ignore && l == *ignore)) sum += static_cast<double>(w[l]);
  }
  return sum;
}

// log_sum_exp over c values `stride` apart.
template <class T>
double log_sum_exp_strided(const T* x, int64_t c, int64_t stride, T& mx) {
  mx = -std::numeric_limits<T>::infinity();
  for (int64_t k = 0; k < c; ++k) mx = std::max(mx, x[k * stride]);
  double sum = 0;
  for (int64_t k = 0; k < c; ++k) sum += math::m_exp(static_cast<T>(x[k * stride] - mx));
  return std::log(sum);
}

// The general path: scores [N,C,d1..dk], labels [N,d1..dk], weights? [C] -> loss ([] or
// [N,d1..dk]), log_prob? [N,C,d1..dk]
void sce_general(const KernelArgs& a) {
  const TensorView &scores = a.in[0], &labels = a.in[1], &loss = a.out[0];
  const TensorView* weights = weights_of(a, 2);
  const TensorView* log_prob = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  const Layout s = layout_of(scores, labels);
  const int64_t c = s.c, d = s.d;
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
  const double eps = a.p<ops::SoftmaxCrossEntropyLossParams>().label_smoothing;
  CB_CHECK(!(eps > 0 && weights));
  dispatch_label(labels.dtype, [&]<class L>(Tag<L>) {
    const L* lab = labels.ptr<const L>();
    dispatch_float(scores.dtype, [&]<class T>(Tag<T>) {
      const T* w = weights ? weights->ptr<const T>() : nullptr;
      const double divisor = weight_sum(lab, s.m, c, ignore, w);
      const T* x = scores.ptr<const T>();
      T* lp = log_prob ? log_prob->ptr<T>() : nullptr;
      T* y = loss.ptr<T>();
      std::vector<double> elems(red == Reduction::None ? 0 : static_cast<size_t>(s.m));
      parallel(s.m, c * 4, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const int64_t at = (p / d) * c * d + p % d;  // element p's class 0
          const T* xp = x + at;
          T mx;
          const double lse = log_sum_exp_strided(xp, c, d, mx);
          const double shift = static_cast<double>(mx) + lse;  // lp = x - shift
          const auto label = static_cast<int64_t>(lab[p]);
          double li = 0;
          if (!(ignore && label == *ignore))
            li = eps > 0 ? shift - (1 - eps) * static_cast<double>(xp[label * d]) -
                               eps * row_mean(xp, c, d)
                         : (shift - static_cast<double>(xp[label * d])) *
                               (w ? static_cast<double>(w[label]) : 1.0);
          if (red == Reduction::None)
            y[p] = static_cast<T>(li);
          else
            elems[static_cast<size_t>(p)] = li;
          if (lp)
            for (int64_t k = 0; k < c; ++k)
              lp[at + k * d] = static_cast<T>(static_cast<double>(xp[k * d]) - shift);
        }
      });
      if (red == Reduction::None) return;
      double total = 0;
      for (double v : elems) total += v;
      y[0] = static_cast<T>(red == Reduction::Mean ? total / divisor : total);
    });
  });
}

// The general path: dloss ([] or [N,d1..dk]), scores [N,C,d1..dk], labels [N,d1..dk],
// weights? [C] -> dscores [N,C,d1..dk]
void sce_general_grad(const KernelArgs& a) {
  const TensorView &dloss = a.in[0], &scores = a.in[1], &labels = a.in[2], &dx = a.out[0];
  const TensorView* weights = weights_of(a, 3);
  const Layout s = layout_of(scores, labels);
  const int64_t c = s.c, d = s.d;
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
  const double eps = a.p<ops::SoftmaxCrossEntropyLossParams>().label_smoothing;
  CB_CHECK(!(eps > 0 && weights));
  dispatch_label(labels.dtype, [&]<class L>(Tag<L>) {
    const L* lab = labels.ptr<const L>();
    dispatch_float(scores.dtype, [&]<class T>(Tag<T>) {
      const T* w = weights ? weights->ptr<const T>() : nullptr;
      const double divisor = weight_sum(lab, s.m, c, ignore, w);
      const T* x = scores.ptr<const T>();
      const T* dl = dloss.ptr<const T>();
      T* g = dx.ptr<T>();
      const double scale = red == Reduction::Mean ? 1.0 / divisor : 1.0;
      parallel(s.m, c * 4, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const int64_t at = (p / d) * c * d + p % d;
          const T* xp = x + at;
          T* gp = g + at;
          const auto label = static_cast<int64_t>(lab[p]);
          if (ignore && label == *ignore) {
            for (int64_t k = 0; k < c; ++k) gp[k * d] = T(0);
            continue;
          }
          const double gr = static_cast<double>(dl[red == Reduction::None ? p : 0]) * scale *
                            (w ? static_cast<double>(w[label]) : 1.0);
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t k = 0; k < c; ++k) mx = std::max(mx, xp[k * d]);
          double sum = 0;
          for (int64_t k = 0; k < c; ++k) {
            T ek = math::m_exp(static_cast<T>(xp[k * d] - mx));
            gp[k * d] = ek;
            sum += ek;
          }
          const double pl =
              static_cast<double>(math::m_exp(static_cast<T>(xp[label * d] - mx))) / sum;
          if (eps > 0) {
            const double u = eps / static_cast<double>(c);
            for (int64_t k = 0; k < c; ++k)
              gp[k * d] = static_cast<T>((static_cast<double>(gp[k * d]) / sum - u) * gr);
            gp[label * d] = static_cast<T>((pl - (1 - eps) - u) * gr);
            continue;
          }
          const double f = gr / sum;
          for (int64_t k = 0; k < c; ++k)
            gp[k * d] = static_cast<T>(static_cast<double>(gp[k * d]) * f);
          gp[label * d] = static_cast<T>((pl - 1.0) * gr);
        }
      });
    });
  });
}
}  // namespace

// SoftmaxCrossEntropyLoss(scores [N,C,d1..dk], labels [N,d1..dk], weights? [C]) -> loss,
// log_prob?
void SoftmaxCrossEntropyLoss(const KernelArgs& a) {
  if (a.in[0].rank() == 2 && !weights_of(a, 2)) return sce_rows(a);
  sce_general(a);
}

// SoftmaxCrossEntropyLossGrad(dloss, scores, labels, weights?) -> dscores
void SoftmaxCrossEntropyLossGrad(const KernelArgs& a) {
  if (a.in[1].rank() == 2 && !weights_of(a, 3)) return sce_rows_grad(a);
  sce_general_grad(a);
}

}  // namespace cb::cpu
