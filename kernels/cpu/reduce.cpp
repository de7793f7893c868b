// ReduceSum and ReduceMean: [d...] -> [d...] with the reduced axes removed (or kept as 1), and
// ReduceSumTo (the gradient of broadcasting): the same sum over the dims broadcasting added.
// The input's dims are collapsed into alternating kept/reduced runs ([A,R,B,...]); the walk goes
// over the input in memory order and adds each contiguous inner run into the output, which the
// caller zeroed: a reduced inner run sums into one output element (in double for floats), a kept
// one adds elementwise into a row. When the outermost run is kept, its slices are independent
// and go to the thread pool. Mean divides by the reduced count at the end.
#include <algorithm>
#include <cstring>

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
// means all, unless noop_with_empty_axes. Returns false for the no-op (output = input).
bool reduced_axes(const KernelArgs& a, bool* red) {
  const auto& p = a.p<ops::ReduceParams>();
  const int64_t r = a.in[0].rank();
  int64_t na = 0;
  bool from_input = !p.axes && a.in.size() > 1 && a.in[1].present();
  if (p.axes)
    na = static_cast<int64_t>(p.axes->size());
  else if (from_input)
    na = a.in[1].numel();
  if (na == 0) {
    if (p.noop_with_empty_axes) return false;
    std::fill(red, red + r, true);
    return true;
  }
  std::fill(red, red + r, false);
  for (int64_t i = 0; i < na; ++i)
    red[norm_axis(from_input ? int_at(a.in[1], i) : (*p.axes)[static_cast<size_t>(i)], r)] = true;
  return true;
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

// Adds input elements [begin, end) (flat, a multiple of the inner run) into y.
template <class T, class Acc>
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
    if (s.reduced[n - 1]) {
      Acc sum = 0;
      for (int64_t k = 0; k < inner; ++k) sum += row[k];
      y[off] = static_cast<T>(y[off] + sum);
    } else {
      T* dst = y + off;
      for (int64_t k = 0; k < inner; ++k) dst[k] = static_cast<T>(dst[k] + row[k]);
    }
    for (int d = n - 2; d >= 0; --d) {
      off += s.out_st[d];
      if (++idx[d] < s.dims[d]) break;
      off -= idx[d] * s.out_st[d];
      idx[d] = 0;
    }
  }
}

// out = the sum (or mean) of in over the dims flagged in red.
void reduce(const KernelArgs& a, const bool* red, bool mean) {
  const TensorView &in = a.in[0], &out = a.out[0];
  Runs s = make_runs(in.dims, red);
  dispatch_numeric(in.dtype, [&]<class T>(Tag<T>) {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    std::fill(y, y + out.numel(), T(0));
    const int64_t total = in.numel();
    if (total > 0) {
      if (!s.reduced[0] && s.n > 1) {  // independent outer slices
        int64_t slice = total / s.dims[0];
        parallel(s.dims[0], slice, [&](int64_t b, int64_t e) {
          reduce_range<T, Acc>(s, x, y, b * slice, e * slice);
        });
      } else {
        reduce_range<T, Acc>(s, x, y, 0, total);
      }
    }
    if (mean && s.reduced_count > 0)
      for (int64_t i = 0; i < out.numel(); ++i)
        y[i] = static_cast<T>(static_cast<Acc>(y[i]) / static_cast<Acc>(s.reduced_count));
  });
}

void reduce_axes(const KernelArgs& a, bool mean) {
  CB_CHECK(a.in[0].rank() <= kMaxRank);
  bool red[kMaxRank];
  if (!reduced_axes(a, red)) return copy_if_distinct(a.in[0], a.out[0]);
  reduce(a, red, mean);
}
}  // namespace

void ReduceSum(const KernelArgs& a) { reduce_axes(a, false); }
void ReduceMean(const KernelArgs& a) { reduce_axes(a, true); }

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
  reduce(a, red, false);
}

}  // namespace cb::cpu
