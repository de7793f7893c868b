// Softmax and LogSoftmax. The input is viewed as [outer, n, inner] and normalised along n:
//  - opset >= 13: n = dims[axis], outer = dims before it, inner = dims after it;
//  - opset < 13 (coerce_2d): n = product of dims[axis:], inner = 1 (rows of the 2-D view).
// Max-subtracted for stability; sums accumulate in double. Inner == 1 is a contiguous row; inner
// > 1 goes in tiles of kTile columns with max and sum on the stack, read row by row.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
constexpr int64_t kTile = 64;

// One [n, w] block of columns (column stride `inner`): y = softmax or log-softmax over n.
template <class T, bool Log>
void block(const T* x, T* y, int64_t n, int64_t inner, int64_t w) {
  T mx[kTile];
  double sum[kTile];
  std::fill(mx, mx + w, -std::numeric_limits<T>::infinity());
  std::fill(sum, sum + w, 0.0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j) mx[j] = std::max(mx[j], x[k * inner + j]);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j) {
      T e = math::m_exp(static_cast<T>(x[k * inner + j] - mx[j]));
      sum[j] += e;
      if constexpr (!Log) y[k * inner + j] = e;
    }
  for (int64_t j = 0; j < w; ++j) {
    if constexpr (Log)
      sum[j] = std::log(sum[j]);
    else
      sum[j] = 1.0 / sum[j];
  }
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j) {
      if constexpr (Log)
        y[k * inner + j] = static_cast<T>(x[k * inner + j] - mx[j] - static_cast<T>(sum[j]));
      else
        y[k * inner + j] = static_cast<T>(y[k * inner + j] * sum[j]);
    }
}

// One contiguous row of n (inner == 1, the common case: logits, attention scores).
template <class T, bool Log>
void row(const T* x, T* y, int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t k = 0; k < n; ++k) mx = std::max(mx, x[k]);
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    T e = math::m_exp(static_cast<T>(x[k] - mx));
    sum += e;
    if constexpr (!Log) y[k] = e;
  }
  if constexpr (Log) {
    const T shift = static_cast<T>(mx + std::log(sum));
    for (int64_t k = 0; k < n; ++k) y[k] = x[k] - shift;
  } else {
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t k = 0; k < n; ++k) y[k] *= inv;
  }
}

template <bool Log>
void softmax(const KernelArgs& a) {
  const auto& p = a.p<ops::SoftmaxParams>();
  const TensorView &in = a.in[0], &out = a.out[0];
  const auto& d = in.dims;
  auto axis = static_cast<size_t>(p.axis);  // normalised by infer(); 0 for a scalar
  int64_t outer = 1, n = 1, inner = 1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i < axis)
      outer *= d[i];
    else if (i == axis || p.coerce_2d)
      n *= d[i];
    else
      inner *= d[i];
  }
  if (in.numel() == 0) return;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  dispatch_float(in.dtype, [&]<class T>(Tag<T>) {
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    if (inner == 1) {
      parallel(a, outer, n * 4, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) row<T, Log>(x + o * n, y + o * n, n);
      });
      return;
    }
    parallel(a, outer * tiles, n * std::min(inner, kTile) * 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / tiles, j0 = (t % tiles) * kTile, off = o * n * inner + j0;
        block<T, Log>(x + off, y + off, n, inner, std::min(kTile, inner - j0));
      }
    });
  });
}
}  // namespace

void Softmax(const KernelArgs& a) { softmax<false>(a); }
void LogSoftmax(const KernelArgs& a) { softmax<true>(a); }

}  // namespace cb::cpu
