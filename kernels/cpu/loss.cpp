// SoftmaxCrossEntropyLoss and its gradient, on scores [N,C] (f32/f64) and labels [N] (integers).
// Forward, per row i: the numerically stable log-softmax lp = x - (max + log sum exp(x - max))
// (exp in T, the sum and the log in double), loss_i = -lp[label_i]; reduction mean (sum / N),
// sum, or none ([N]); log_prob [N,C] = lp when the node asks for it.
// Gradient: dscores[i,c] = (softmax(x_i)[c] - [c == label_i]) * g_i with g_i = dloss (sum),
// dloss / N (mean), dloss[i] (none).
// Samples labelled ignore_index add nothing: loss 0, gradient 0, not counted by the mean.
// Labels are user data: one outside [0, C) (and not ignore_index) is a cb::Error naming it and C,
// raised before any work (never a read out of bounds). Rows are independent and go to the thread
// pool; mean and sum add the per-row losses in row order afterwards, so the result does not depend
// on the split.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

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

// labels [n] must be class indices in [0, c) or the ignored label; returns how many are not
// ignored (the divisor of the mean).
template <class L>
int64_t check_labels(const L* labels, int64_t n, int64_t c, std::optional<int64_t> ignore) {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto l = static_cast<int64_t>(labels[i]);
    if (ignore && l == *ignore) continue;
    ++counted;
    if (l < 0 || l >= c)
      fail(
          "SoftmaxCrossEntropyLoss: label {} (sample {}) is out of range for {} classes: labels "
          "must be in [0, {}); check the dataset's labels against the model's number of outputs",
          l, i, c, c);
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
}  // namespace

// SoftmaxCrossEntropyLoss(scores [N,C], labels [N]) -> loss ([] for mean/sum, [N] for none),
// log_prob? [N,C]
void SoftmaxCrossEntropyLoss(const KernelArgs& a) {
  const TensorView &scores = a.in[0], &labels = a.in[1], &loss = a.out[0];
  const TensorView* log_prob = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  CB_CHECK(scores.rank() == 2 && labels.numel() == scores.dims[0]);
  const int64_t n = scores.dims[0], c = scores.dims[1];
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
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
          const double li =
              ignore && label == *ignore ? 0.0 : shift - static_cast<double>(xi[label]);
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

// SoftmaxCrossEntropyLossGrad(dloss ([] or [N]), scores [N,C], labels [N]) -> dscores [N,C]
void SoftmaxCrossEntropyLossGrad(const KernelArgs& a) {
  const TensorView &dloss = a.in[0], &scores = a.in[1], &labels = a.in[2], &dx = a.out[0];
  CB_CHECK(scores.rank() == 2 && labels.numel() == scores.dims[0]);
  const int64_t n = scores.dims[0], c = scores.dims[1];
  const Reduction red = reduction_of(a);
  const std::optional<int64_t> ignore = a.p<ops::SoftmaxCrossEntropyLossParams>().ignore_index;
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
          const double f = gr / sum;  // softmax_k * g = e_k * (g / sum)
          for (int64_t k = 0; k < c; ++k) gi[k] = static_cast<T>(static_cast<double>(gi[k]) * f);
          const double p = static_cast<double>(math::m_exp(static_cast<T>(xi[label] - mx))) / sum;
          gi[label] = static_cast<T>((p - 1.0) * gr);
        }
      });
    });
  });
}

}  // namespace cb::cpu
