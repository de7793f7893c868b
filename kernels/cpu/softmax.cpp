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
#include <vector>

#include "kernels/common/geometry.h"
#include "kernels/common/scalar_math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/masked_softmax_rows.h"
#include "kernels/cpu/storage.h"
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

//
// live < n (softmax only): x[live..n) all equal `tail` and are not read (y may be x). Where
// e^(tail - max) is exactly 0 those y are 0 and the rest of the row is computed as its first
// `live` elements (a multiple of kExpChunk: exp_shifted's chunks and the sums' lanes line up,
// and the zeros would have added nothing), bit for bit the whole row's result; otherwise the
// tail is written out and the whole row computed.
CB_CPU_CLONES void row_f32(const float* x, float* y, int64_t n, bool log, int64_t live = -1,
                           float tail = 0) {
  if (live < 0) live = n;
  float m[kLanes];
  std::fill(m, m + kLanes, -std::numeric_limits<float>::infinity());
  int64_t k = 0;
  for (; k + kLanes <= live; k += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = std::max(m[j], x[k + j]);
  float mx = -std::numeric_limits<float>::infinity();
  for (; k < live; ++k) mx = std::max(mx, x[k]);
  for (int j = 0; j < kLanes; ++j) mx = std::max(mx, m[j]);
  if (live < n) {
    CB_CHECK(!log && live % kExpChunk == 0);
    if (live > 0 && tail - mx < kExpZero) {
      std::fill(y + live, y + n, 0.0f);
      n = live;
    } else {
      std::fill(y + live, y + n, tail);
      x = y;  // the row is y's now: x's tail was never written
      mx = std::max(mx, tail);
    }
  }
  exp_shifted(x, mx, y, n);  // LogSoftmax: scratch, rewritten below
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
// ---- MaskedSoftmax(X, mask?) and MaskedSoftmaxGrad(dY, Y, mask?) over the last axis ----
using MaskKind = ops::MaskedSoftmaxParams::Mask;

// Row z of scale * x, masked as the unfused Mul and Where/Add nodes compute it (in T). The mask
// row is contiguous (cs 1) or one value (cs 0); each form is its own loop, so each vectorises.
template <class T, class M>
inline void masked_logits(const T* x, const M* m, int64_t cs, T* z, int64_t n, T scale,
                          MaskKind kind, T fill) {
  if (kind == MaskKind::None) {
    for (int64_t k = 0; k < n; ++k) z[k] = x[k] * scale;
    return;
  }
  if (cs == 0) {  // one mask value for the row
    const M m0 = m[0];
    for (int64_t k = 0; k < n; ++k) z[k] = x[k] * scale;
    if (kind == MaskKind::Add) {
      for (int64_t k = 0; k < n; ++k) z[k] = z[k] + static_cast<T>(m0);
    } else if ((m0 != M(0)) == (kind == MaskKind::FillWhereTrue)) {
      for (int64_t k = 0; k < n; ++k) z[k] = fill;
    }
    return;
  }
  switch (kind) {
    case MaskKind::FillWhereTrue:
      for (int64_t k = 0; k < n; ++k) z[k] = m[k] ? fill : T(x[k] * scale);
      break;
    case MaskKind::FillWhereFalse:
      for (int64_t k = 0; k < n; ++k) z[k] = m[k] ? T(x[k] * scale) : fill;
      break;
    default:  // Add
      for (int64_t k = 0; k < n; ++k) z[k] = T(x[k] * scale) + static_cast<T>(m[k]);
      break;
  }
}

// One past the last element of a mask row of n that a Where mask keeps (0: it keeps none), so
// that a causal mask's filled end of each row can be skipped.
template <class M>
int64_t kept_end(const M* m, int64_t n, MaskKind kind) {
  const bool fill_on = kind == MaskKind::FillWhereTrue;
  while (n > 0 && (m[n - 1] != M(0)) == fill_on) --n;
  return n;
}

// n rounded up to a multiple of `to`, at most `cap`.
inline int64_t round_up_to(int64_t n, int64_t to, int64_t cap) {
  return std::min(cap, (n + to - 1) / to * to);
}

// kept_end of each row of a Where mask whose rows are X's (col_stride 1), else empty.
template <class M>
std::vector<int64_t> kept_ends(const TensorView* mask, const geom::MaskPlan& pl, MaskKind kind) {
  std::vector<int64_t> ends;
  if (!mask || pl.col_stride == 0 ||
      (kind != MaskKind::FillWhereTrue && kind != MaskKind::FillWhereFalse))
    return ends;
  const M* m = mask->ptr<const M>();
  ends.resize(static_cast<size_t>(mask->numel() / pl.n));
  for (size_t i = 0; i < ends.size(); ++i)
    ends[i] = kept_end(m + static_cast<int64_t>(i) * pl.n, pl.n, kind);
  return ends;
}

// Rows [r0, r1) of X (rows of pl.n), x and y pointing at row r0; ends: kept_ends' (null where
// empty).
template <class T, class M>
CB_CPU_CLONES void masked_rows(const T* x, const M* mask, const int64_t* ends, T* y,
                               const geom::MaskPlan& pl, int64_t r0, int64_t r1, T scale,
                               MaskKind kind, T fill) {
  const int64_t n = pl.n;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t off = mask ? pl.row_offset(r) : 0;
    const M* m = mask ? mask + off : nullptr;
    if constexpr (std::is_same_v<T, float>) {
      // A row whose end the mask fills (causal attention): the filled end's logits are all
      // `fill`; row_f32 skips them where they come out 0.
      const int64_t live = ends ? round_up_to(ends[off / n], kExpChunk, n) : n;
      masked_logits(x + (r - r0) * n, m, pl.col_stride, y + (r - r0) * n, live, scale, kind, fill);
      row_f32(y + (r - r0) * n, y + (r - r0) * n, n, false, live, fill);  // in place
    } else {
      masked_logits(x + (r - r0) * n, m, pl.col_stride, y + (r - r0) * n, n, scale, kind, fill);
      row<T, false>(y + (r - r0) * n, y + (r - r0) * n, n);
    }
  }
}

// dX = scale * y (dy - sum(dy y)), 0 where the mask filled: SoftmaxGrad, then the Where's and the
// Mul's gradients, in their order. A row whose end the mask fills and whose y is 0 there (the
// forward's skipped end) sums its first elements only, a multiple of the 8 lanes (the rest
// would add dy * 0 = 0 to them, but for a non-finite dy there), and its end's dX is 0. y is
// MaskedSoftmax's output for the same mask. Rows [r0, r1), dy, y and dx pointing at row r0.
// O = uint16_t: dX stored as bf16 (Value::bf16_storage), each row computed into `row` (n
// elements) and then rounded.
template <class T, class M, class O = T>
CB_CPU_CLONES void masked_grad_rows(const T* dy, const T* y, const M* mask, const int64_t* ends,
                                    O* dx, const geom::MaskPlan& pl, int64_t r0, int64_t r1,
                                    T scale, MaskKind kind, T* row = nullptr) {
  const int64_t n = pl.n, cs = pl.col_stride;
  const bool where = kind == MaskKind::FillWhereTrue || kind == MaskKind::FillWhereFalse;
  for (int64_t r = r0; r < r1; ++r) {
    const T *g = dy + (r - r0) * n, *v = y + (r - r0) * n;
    T* o;
    if constexpr (std::is_same_v<O, T>)
      o = dx + (r - r0) * n;
    else
      o = row;
    const int64_t off = where ? pl.row_offset(r) : 0;
    const M* m = where ? mask + off : nullptr;
    int64_t live = n;
    if (ends) {
      live = round_up_to(ends[off / n], 8, n);
      // Every filled element of a row has the same logit, so MaskedSoftmax gave them one y:
      // the row's last element (filled where live < n) stands for them all.
      if (live < n && v[n - 1] != T(0)) live = n;
    }
    double s[8] = {};
    int64_t k = 0;
    for (; k + 8 <= live; k += 8)
      for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(g[k + j]) * v[k + j];
    double sum = 0;
    for (; k < live; ++k) sum += static_cast<double>(g[k]) * v[k];
    for (int j = 0; j < 8; ++j) sum += s[j];
    for (k = 0; k < live; ++k) o[k] = static_cast<T>(v[k] * (g[k] - sum)) * scale;
    std::fill(o + live, o + n, T(0));  // masked: the Where's gradient is 0 there
    if (where) {
      const bool fill_on = kind == MaskKind::FillWhereTrue;
      if (cs == 0) {
        if ((m[0] != M(0)) == fill_on) std::fill(o, o + n, T(0));
      } else {
        for (k = 0; k < live; ++k) o[k] = (m[k] != M(0)) == fill_on ? T(0) : o[k];
      }
    }
    if constexpr (!std::is_same_v<O, T>)
      for (k = 0; k < n; ++k) store_s(dx + (r - r0) * n, k, o[k]);
  }
}

// Calls f(M* tag) with the mask's element type: bool for Where masks, T for Add, none (T).
template <class T, class F>
void with_mask_type(const ops::MaskedSoftmaxParams& p, F&& f) {
  if (p.mask == MaskKind::FillWhereTrue || p.mask == MaskKind::FillWhereFalse)
    f(static_cast<const bool*>(nullptr));
  else
    f(static_cast<const T*>(nullptr));
}

}  // namespace

void MaskedSoftmax(const KernelArgs& a) {
  const auto& p = a.p<ops::MaskedSoftmaxParams>();
  const TensorView &x = a.in[0], &y = a.out[0];
  const bool has = a.in.size() > 1 && a.in[1].present();
  const MaskedRowsPlan mp = plan_masked_rows(x.dims, has ? &a.in[1] : nullptr, p, x.dtype);
  const geom::MaskPlan& pl = mp.pl;
  if (x.numel() == 0) return;
  const int64_t* e_ = mp.ends.empty() ? nullptr : mp.ends.data();
  dispatch_float(x.dtype, [&]<class T>(Tag<T>) {
    with_mask_type<T>(p, [&]<class M>(const M*) {
      const auto* m = static_cast<const M*>(mp.mask);
      parallel(pl.rows, pl.n * 6, [&](int64_t b, int64_t e) {
        masked_rows<T, M>(x.ptr<const T>() + b * pl.n, m, e_, y.ptr<T>() + b * pl.n, pl, b, e,
                          static_cast<T>(p.scale), p.mask, static_cast<T>(p.fill));
      });
    });
  });
}

void MaskedSoftmaxGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::MaskedSoftmaxParams>();
  const TensorView &dy = a.in[0], &y = a.in[1], &dx = a.out[0];
  const bool has = a.in.size() > 2 && a.in[2].present();
  const MaskedRowsPlan mp = plan_masked_rows(y.dims, has ? &a.in[2] : nullptr, p, y.dtype);
  const geom::MaskPlan& pl = mp.pl;
  if (y.numel() == 0) return;
  const int64_t* e_ = mp.ends.empty() ? nullptr : mp.ends.data();
  dispatch_float(y.dtype, [&]<class T>(Tag<T>) {
    with_mask_type<T>(p, [&]<class M>(const M*) {
      const auto* m = static_cast<const M*>(mp.mask);
      if constexpr (std::is_same_v<T, float>) {
        if (dx.bf16_storage) {  // dX only bf16 products read (assign_bf16_operands): rounded
          const int64_t n = pl.n;
          auto* dx16 = static_cast<uint16_t*>(dx.data);
          parallel(pl.rows, n * 4, [&](int64_t b, int64_t e) {
            masked_grad_rows<T, M, uint16_t>(dy.ptr<const T>() + b * n, y.ptr<const T>() + b * n, m,
                                             e_, dx16 + b * n, pl, b, e, static_cast<T>(p.scale),
                                             p.mask, scratch<float, 22>(n));
          });
          return;
        }
      }
      CB_CHECK(!dx.bf16_storage);
      parallel(pl.rows, pl.n * 4, [&](int64_t b, int64_t e) {
        masked_grad_rows<T, M>(dy.ptr<const T>() + b * pl.n, y.ptr<const T>() + b * pl.n, m, e_,
                               dx.ptr<T>() + b * pl.n, pl, b, e, static_cast<T>(p.scale), p.mask);
      });
    });
  });
}

MaskedRowsPlan plan_masked_rows(const std::vector<int64_t>& x_dims, const TensorView* mask,
                                const ops::MaskedSoftmaxParams& p, DType x_dtype) {
  MaskedRowsPlan mp;
  mp.p = p;
  mp.pl = geom::mask_plan(x_dims, mask ? mask->dims : std::vector<int64_t>{}, mask != nullptr);
  if (!mask) return mp;
  mp.mask = mask->data;
  if (p.mask == MaskKind::FillWhereTrue || p.mask == MaskKind::FillWhereFalse) {
    if (mp.pl.rows * mp.pl.n > 0) mp.ends = kept_ends<bool>(mask, mp.pl, p.mask);
  } else {
    CB_CHECK(mask->dtype == x_dtype);  // an additive mask of X's type (MaskedSoftmax's infer)
  }
  return mp;
}

void masked_softmax_rows(const MaskedRowsPlan& mp, const float* x, float* y, int64_t r0,
                         int64_t r1) {
  with_mask_type<float>(mp.p, [&]<class M>(const M*) {
    masked_rows<float, M>(x, static_cast<const M*>(mp.mask),
                          mp.ends.empty() ? nullptr : mp.ends.data(), y, mp.pl, r0, r1, mp.p.scale,
                          mp.p.mask, mp.p.fill);
  });
}

void masked_softmax_grad_rows(const MaskedRowsPlan& mp, const float* dy, const float* y, float* dx,
                              uint16_t* dx16, int64_t r0, int64_t r1) {
  with_mask_type<float>(mp.p, [&]<class M>(const M*) {
    const M* m = static_cast<const M*>(mp.mask);
    const int64_t* e = mp.ends.empty() ? nullptr : mp.ends.data();
    if (dx)
      masked_grad_rows<float, M>(dy, y, m, e, dx, mp.pl, r0, r1, mp.p.scale, mp.p.mask);
    else
      masked_grad_rows<float, M, uint16_t>(dy, y, m, e, dx16, mp.pl, r0, r1, mp.p.scale, mp.p.mask,
                                           scratch<float, 22>(mp.pl.n));
  });
}

void Softmax(const KernelArgs& a) { softmax<false>(a); }
void LogSoftmax(const KernelArgs& a) { softmax<true>(a); }
void SoftmaxGrad(const KernelArgs& a) { softmax_grad<false>(a); }
void LogSoftmaxGrad(const KernelArgs& a) { softmax_grad<true>(a); }

}  // namespace cb::cpu
