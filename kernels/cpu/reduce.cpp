// The Reduce* kernels: [d...] -> [d...] with the reduced axes removed (or kept as 1), and
// ReduceSumTo (the gradient of broadcasting): a sum over the dims broadcasting added.
// The input's dims are collapsed into alternating kept/reduced runs ([A,R,B,...]); the walk goes
// over the input in memory order and folds each contiguous inner run into the output, which
// starts at the reduction's identity: a reduced inner run folds into one output element (sums and
// products in double for floats), a kept one folds elementwise into a row. When the outermost run
// is kept, its slices are independent and go to the thread pool. A last pass finishes the
// elements where the reduction needs one (Mean divides by the count, L2 takes the root, LogSum
// the log). Each reduction is a small policy (Reducer below) over this one walk.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
constexpr int kMaxRank = 16;

struct Runs {
  int n = 0;
  int64_t dims[kMaxRank];
  bool reduced[kMaxRank];
  int64_t out_st[kMaxRank];  // output element stride of kept runs (0 for reduced ones)
  int64_t reduced_count = 1;
};

// Which axes are reduced: from the params (attribute), else from the axes input; none listed
// means all, unless noop_with_empty_axes (then none).
void reduced_axes(const KernelArgs& a, bool* red) {
  const auto& p = a.p<ops::ReduceParams>();
  const int64_t r = a.in[0].rank();
  int64_t na = 0;
  bool from_input = !p.axes && a.in.size() > 1 && a.in[1].present();
  if (p.axes)
    na = static_cast<int64_t>(p.axes->size());
  else if (from_input)
    na = a.in[1].numel();
  std::fill(red, red + r, na == 0 && !p.noop_with_empty_axes);
  for (int64_t i = 0; i < na; ++i)
    red[norm_axis(from_input ? int_at(a.in[1], i) : (*p.axes)[static_cast<size_t>(i)], r)] = true;
}

Runs make_runs(const std::vector<int64_t>& dims, const bool* red) {
  Runs s;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (red[d]) s.reduced_count *= dims[d];
    if (dims[d] == 1) continue;
    if (s.n > 0 && s.reduced[s.n - 1] == red[d]) {
      s.dims[s.n - 1] *= dims[d];
      continue;
    }
    s.dims[s.n] = dims[d];
    s.reduced[s.n] = red[d];
    ++s.n;
  }
  if (s.n == 0) s.dims[0] = 1, s.reduced[0] = false, s.n = 1;
  int64_t acc = 1;
  for (int i = s.n - 1; i >= 0; --i) {
    s.out_st[i] = s.reduced[i] ? 0 : acc;
    if (!s.reduced[i]) acc *= s.dims[i];
  }
  return s;
}

// ---- reductions: identity, fold of a contiguous run into one element, elementwise fold of a row,
// and the last pass. Acc: double for floats, T for integers (which wrap, as numpy's).
enum class Kind { Sum, Mean, SumSquare, L1, L2, LogSum, LogSumExp, Max, Min, Prod };

template <class T, Kind K>
struct Reducer {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  using L = std::numeric_limits<T>;
  static constexpr bool kMax = K == Kind::Max, kMin = K == Kind::Min;

  static T identity() {
    if constexpr (kMax) return L::has_infinity ? -L::infinity() : L::lowest();
    if constexpr (kMin) return L::has_infinity ? L::infinity() : L::max();
    if constexpr (K == Kind::LogSumExp) return -L::infinity();
    if constexpr (K == Kind::Prod) return T(1);
    return T(0);
  }
  // The element's term: x, x^2, |x|.
  static Acc term(T x) {
    if constexpr (K == Kind::SumSquare || K == Kind::L2) return Acc(x) * Acc(x);
    if constexpr (K == Kind::L1) return x < T(0) ? Acc(-Acc(x)) : Acc(x);
    return Acc(x);
  }
  // max/min that propagate NaN (numpy's maximum.reduce, PyTorch's amax).
  static T pick(T y, T x) {
    if constexpr (kMin) return x < y || math::is_nan(x) ? x : y;
    return x > y || math::is_nan(x) ? x : y;  // Max, and LogSumExp's shift
  }
  // log(exp(a) + exp(b)) without overflow.
  static T log_add_exp(T a, T b) {
    if (a < b) std::swap(a, b);
    if (b == -L::infinity() || math::is_nan(a)) return a;
    return T(a + std::log1p(std::exp(b - a)));
  }
  static T fold_run(T y, const T* x, int64_t n) {
    if constexpr (kMax || kMin) {
      T m = y;
      for (int64_t k = 0; k < n; ++k) m = pick(m, x[k]);
      return m;
    } else if constexpr (K == Kind::LogSumExp) {
      T m = -L::infinity();
      for (int64_t k = 0; k < n; ++k) m = pick(m, x[k]);
      if (!std::isfinite(m)) return log_add_exp(y, m);  // all -inf, +inf present, or NaN
      Acc s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::exp(Acc(x[k]) - Acc(m));
      return log_add_exp(y, T(Acc(m) + std::log(s)));
    } else if constexpr (K == Kind::Prod) {
      Acc p = 1;
      for (int64_t k = 0; k < n; ++k) p *= Acc(x[k]);
      return T(Acc(y) * p);
    } else {
      Acc s = 0;
      for (int64_t k = 0; k < n; ++k) s += term(x[k]);
      return T(Acc(y) + s);
    }
  }
  static void fold_row(T* y, const T* x, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      if constexpr (kMax || kMin)
        y[k] = pick(y[k], x[k]);
      else if constexpr (K == Kind::LogSumExp)
        y[k] = log_add_exp(y[k], x[k]);
      else if constexpr (K == Kind::Prod)
        y[k] = T(y[k] * x[k]);
      else
        y[k] = T(y[k] + T(term(x[k])));
    }
  }
  static constexpr bool kFinish = K == Kind::Mean || K == Kind::L2 || K == Kind::LogSum;
  static T finish(T y, int64_t count) {
    if constexpr (K == Kind::Mean) return count > 0 ? T(Acc(y) / Acc(count)) : y;
    if constexpr (K == Kind::L2) return T(std::sqrt(double(y)));
    if constexpr (K == Kind::LogSum) return T(std::log(double(y)));
    return y;
  }
};

// Folds input elements [begin, end) (flat, a multiple of the inner run) into y.
template <class R, class T>
void reduce_range(const Runs& s, const T* x, T* y, int64_t begin, int64_t end) {
  const int n = s.n;
  const int64_t inner = s.dims[n - 1];
  int64_t idx[kMaxRank], off = 0, rem = begin / inner;
  for (int d = n - 2; d >= 0; --d) {
    idx[d] = rem % s.dims[d];
    rem /= s.dims[d];
    off += idx[d] * s.out_st[d];
  }
  for (int64_t pos = begin; pos < end; pos += inner) {
    const T* row = x + pos;
    if (s.reduced[n - 1])
      y[off] = R::fold_run(y[off], row, inner);
    else
      R::fold_row(y + off, row, inner);
    for (int d = n - 2; d >= 0; --d) {
      off += s.out_st[d];
      if (++idx[d] < s.dims[d]) break;
      off -= idx[d] * s.out_st[d];
      idx[d] = 0;
    }
  }
}

// Columns per task when the rows of a [rows, cols] input are reduced: at least this many, and
// up to kMaxColumnChunk so that each thread reads long runs of every row (a run of 64 floats per
// row steps through memory a page at a time and runs at half the rate).
constexpr int64_t kColumnChunk = 64, kMaxColumnChunk = 1024;

// out = the reduction K of in over the dims flagged in red.
template <Kind K>
void reduce(const KernelArgs& a, const bool* red) {
  const TensorView &in = a.in[0], &out = a.out[0];
  CB_CHECK(in.rank() <= kMaxRank);
  Runs s = make_runs(in.dims, red);
  dispatch_numeric(in.dtype, [&]<class T>(Tag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      throw InternalError("no bool reductions");  // dispatch_numeric without bool never calls
    } else {
      using R = Reducer<T, K>;
      const T* x = in.ptr<const T>();
      T* y = out.ptr<T>();
      const int64_t total = in.numel();
      std::fill(y, y + out.numel(), R::identity());
      if (total > 0) {
        if (!s.reduced[0] && s.n > 1) {  // independent outer slices
          int64_t slice = total / s.dims[0];
          parallel(s.dims[0], slice,
                   [&](int64_t b, int64_t e) { reduce_range<R>(s, x, y, b * slice, e * slice); });
        } else if (s.n == 2 && !s.reduced[1] && s.dims[1] >= 2 * kColumnChunk) {
          // [rows, cols] -> [cols] (a bias's gradient): the columns split over the pool, each
          // still folded in row order, so the sums are the same bits for any thread count.
          const int64_t rows = s.dims[0], cols = s.dims[1];
          const int64_t threads = current_pool() ? current_pool()->size() : 1;
          const int64_t chunk = std::clamp(((cols + threads - 1) / threads + 15) & ~int64_t{15},
                                           kColumnChunk, kMaxColumnChunk);
          parallel((cols + chunk - 1) / chunk, rows * chunk, [&](int64_t b, int64_t e) {
            const int64_t c0 = b * chunk, c1 = std::min(cols, e * chunk);
            for (int64_t r = 0; r < rows; ++r) R::fold_row(y + c0, x + r * cols + c0, c1 - c0);
          });
        } else {
          reduce_range<R>(s, x, y, 0, total);
        }
      }
      if constexpr (R::kFinish)
        for (int64_t i = 0; i < out.numel(); ++i) y[i] = R::finish(y[i], s.reduced_count);
    }
  });
}

template <Kind K>
void reduce_axes(const KernelArgs& a) {
  CB_CHECK(a.in[0].rank() <= kMaxRank);
  bool red[kMaxRank];
  reduced_axes(a, red);
  reduce<K>(a, red);
}
}  // namespace

void ReduceSum(const KernelArgs& a) { reduce_axes<Kind::Sum>(a); }
void ReduceMean(const KernelArgs& a) { reduce_axes<Kind::Mean>(a); }
void ReduceSumSquare(const KernelArgs& a) { reduce_axes<Kind::SumSquare>(a); }
void ReduceL1(const KernelArgs& a) { reduce_axes<Kind::L1>(a); }
void ReduceL2(const KernelArgs& a) { reduce_axes<Kind::L2>(a); }
void ReduceLogSum(const KernelArgs& a) { reduce_axes<Kind::LogSum>(a); }
void ReduceLogSumExp(const KernelArgs& a) { reduce_axes<Kind::LogSumExp>(a); }
void ReduceMax(const KernelArgs& a) { reduce_axes<Kind::Max>(a); }
void ReduceMin(const KernelArgs& a) { reduce_axes<Kind::Min>(a); }
void ReduceProd(const KernelArgs& a) { reduce_axes<Kind::Prod>(a); }

// ReduceSumTo(x [d...], shape) -> [t...] (t broadcasts to d): sums the dims broadcasting added
// (leading) or stretched (t_i == 1 < d_i), e.g. [2,3,4] -> [3,1]: over dims 0 and 2.
void ReduceSumTo(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  const int64_t r = in.rank(), shift = r - out.rank();
  CB_CHECK(r <= kMaxRank && shift >= 0);
  bool red[kMaxRank];
  for (int64_t d = 0; d < r; ++d)
    red[d] = d < shift || (out.dims[static_cast<size_t>(d - shift)] == 1 &&
                           in.dims[static_cast<size_t>(d)] != 1);
  reduce<Kind::Sum>(a, red);
}

}  // namespace cb::cpu
