// Softmax and LogSoftmax, and their gradients SoftmaxGrad / LogSoftmaxGrad (dY, Y) -> dX. The
// input is viewed as [outer, n, inner] and normalised along n:
//  - opset >= 13: n = dims[axis], outer = dims before it, inner = dims after it;
//  - opset < 13 (coerce_2d): n = product of dims[axis:], inner = 1 (rows of the 2-D view).
// Max-subtracted for stability; sums accumulate in double. Inner == 1 is a contiguous row (f32:
// vectorised, libmvec's expf); inner > 1 goes in tiles of kTile columns with max and sum on the
// stack, read row by row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/vector_math.h"
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

// f32 rows (attention scores, logits): the same arithmetic in loops GCC vectorises, exp from
// libmvec (vector_math.h), the max and the double sum kept in 16 and 8 lanes.
constexpr int kLanes = 16;

CB_CPU_CLONES void row_f32(const float* x, float* y, int64_t n, bool log) {
  float m[kLanes];
  std::fill(m, m + kLanes, -std::numeric_limits<float>::infinity());
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = std::max(m[j], x[k + j]);
  float mx = -std::numeric_limits<float>::infinity();
  for (; k < n; ++k) mx = std::max(mx, x[k]);
  for (int j = 0; j < kLanes; ++j) mx = std::max(mx, m[j]);
  for (k = 0; k < n; ++k) y[k] = expf(x[k] - mx);  // LogSoftmax: scratch, rewritten below
  double s[8] = {};
  for (k = 0; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += y[k + j];
  double sum = 0;
  for (; k < n; ++k) sum += y[k];
  for (int j = 0; j < 8; ++j) sum += s[j];
  if (log) {
    const float shift = static_cast<float>(mx + std::log(sum));
    for (k = 0; k < n; ++k) y[k] = x[k] - shift;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
    for (k = 0; k < n; ++k) y[k] *= inv;
  }
}

// Softmax dx = y (dy - sum(dy y)); LogSoftmax dx = dy - exp(y) sum(dy); sums in double, 8 lanes.
CB_CPU_CLONES void grad_row_f32(const float* dy, const float* y, float* dx, int64_t n, bool log) {
  double s[8] = {};
  int64_t k = 0;
  if (log) {
    for (; k + 8 <= n; k += 8)
      for (int j = 0; j < 8; ++j) s[j] += dy[k + j];
  } else {
    for (; k + 8 <= n; k += 8)
      for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(dy[k + j]) * y[k + j];
  }
  double sum = 0;
  for (; k < n; ++k) sum += log ? static_cast<double>(dy[k]) : static_cast<double>(dy[k]) * y[k];
  for (int j = 0; j < 8; ++j) sum += s[j];
  if (log) {
    for (k = 0; k < n; ++k) dx[k] = static_cast<float>(dy[k] - expf(y[k]) * sum);
  } else {
    for (k = 0; k < n; ++k) dx[k] = static_cast<float>(y[k] * (dy[k] - sum));
  }
}

// dims viewed as [outer, n, inner] for SoftmaxParams (see the top of the file).
using View = geom::SoftmaxView;

template <bool Log>
void softmax(const KernelArgs& a) {
  const TensorView &in = a.in[0], &out = a.out[0];
  // Plain variables, not a structured binding: clang < 16 cannot capture those in a lambda.
  const View view = geom::softmax_view(a.p<ops::SoftmaxParams>(), in.dims);
  const int64_t outer = view.outer, n = view.n, inner = view.inner;
  if (in.numel() == 0) return;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  dispatch_float(in.dtype, [&]<class T>(Tag<T>) {
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    if (inner == 1) {
      parallel(outer, n * 4, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          if constexpr (std::is_same_v<T, float>)
            row_f32(x + o * n, y + o * n, n, Log);
          else
            row<T, Log>(x + o * n, y + o * n, n);
        }
      });
      return;
    }
    parallel(outer * tiles, n * std::min(inner, kTile) * 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t o = t / tiles, j0 = (t % tiles) * kTile, off = o * n * inner + j0;
        block<T, Log>(x + off, y + off, n, inner, std::min(kTile, inner - j0));
      }
    });
  });
}

// One [n, w] block of columns (column stride `inner`) of the gradients, y being the forward's
// output: Softmax dx = y (dy - sum(dy y)); LogSoftmax dx = dy - exp(y) sum(dy) (sums in double).
template <class T, bool Log>
void grad_block(const T* dy, const T* y, T* dx, int64_t n, int64_t inner, int64_t w) {
  double sum[kTile];
  std::fill(sum, sum + w, 0.0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t i = k * inner + j;
      if constexpr (Log)
        sum[j] += dy[i];
      else
        sum[j] += static_cast<double>(dy[i]) * y[i];
    }
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t i = k * inner + j;
      if constexpr (Log)
        dx[i] = static_cast<T>(dy[i] - math::m_exp(y[i]) * sum[j]);
      else
        dx[i] = static_cast<T>(y[i] * (dy[i] - sum[j]));
    }
}

// (dY, Y) -> dX, all [d...], viewed as the forward viewed its input; a contiguous row when
// inner == 1, else tiles of kTile columns.
template <bool Log>
void softmax_grad(const KernelArgs& a) {
  const TensorView &dy = a.in[0], &y = a.in[1], &dx = a.out[0];
  const View view = geom::softmax_view(a.p<ops::SoftmaxParams>(), y.dims);
  const int64_t outer = view.outer, n = view.n, inner = view.inner;
  if (y.numel() == 0) return;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  dispatch_float(y.dtype, [&]<class T>(Tag<T>) {
    const T *g = dy.ptr<const T>(), *v = y.ptr<const T>();
    T* o = dx.ptr<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (inner == 1) {
        parallel(outer, n * 4, [&](int64_t b, int64_t e) {
          for (int64_t q = b; q < e; ++q) grad_row_f32(g + q * n, v + q * n, o + q * n, n, Log);
        });
        return;
      }
    }
    parallel(outer * tiles, n * std::min(inner, kTile) * 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t q = t / tiles, j0 = (t % tiles) * kTile, off = q * n * inner + j0;
        grad_block<T, Log>(g + off, v + off, o + off, n, inner, std::min(kTile, inner - j0));
      }
    });
  });
}
}  // namespace

void Softmax(const KernelArgs& a) { softmax<false>(a); }
void LogSoftmax(const KernelArgs& a) { softmax<true>(a); }
void SoftmaxGrad(const KernelArgs& a) { softmax_grad<false>(a); }
void LogSoftmaxGrad(const KernelArgs& a) { softmax_grad<true>(a); }

}  // namespace cb::cpu
