// LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?
// X is viewed as [outer, m] with m = product of dims[axis:]; per row:
//   mean = sum(x) / m, var = sum((x - mean)^2) / m, inv = 1 / sqrt(var + epsilon),
//   y = (x - mean) * inv * scale + b
// with statistics in double (8-lane sums, kernel_util.h) and written as f32 (stash_type 1) in
// [outer dims, 1...]. Scale and B have the normalised dims or broadcast to them (numpy rules,
// right-aligned).
#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
// Index into a tensor `v` broadcast to the normalised dims `norm` (rank nr) of flat index k.
int64_t bcast_index(const TensorView& v, const int64_t* norm, int64_t nr, int64_t k) {
  int64_t idx = 0, st = 1;
  for (int64_t d = nr - 1, j = v.rank() - 1; d >= 0; --d, --j) {
    int64_t c = k % norm[d];
    k /= norm[d];
    if (j < 0) continue;
    int64_t vd = v.dims[static_cast<size_t>(j)];
    if (vd != 1) idx += c * st;
    st *= vd;
  }
  return idx;
}
// Row `row` (xr, m elements): mean and 1/sqrt(biased variance + eps), two-pass in double lane
// sums, written to the optional Mean / InvStdDev outputs; returned as T.
template <class T>
inline std::pair<T, T> row_stats(const T* xr, int64_t m, double eps, int64_t row, float* mean_out,
                                 float* inv_out) {
  const double mean = m > 0 ? lane_sum(xr, m) / static_cast<double>(m) : 0.0;
  const double var = m > 0 ? lane_sq_dev(xr, m, mean) / static_cast<double>(m) : 0.0;
  const double inv = 1.0 / std::sqrt(var + eps);
  if (mean_out) mean_out[row] = static_cast<float>(mean);
  if (inv_out) inv_out[row] = static_cast<float>(inv);
  return {static_cast<T>(mean), static_cast<T>(inv)};
}

// Rows [r0, r1) of x [outer, m] normalised into y, scale and bias of m elements (b may be null).
template <class T>
CB_CPU_CLONES void rows_full(const T* xs, const T* s, const T* b, T* y, int64_t m, int64_t r0,
                             int64_t r1, double eps, float* mean_out, float* inv_out) {
  for (int64_t row = r0; row < r1; ++row) {
    const T* xr = xs + row * m;
    T* yr = y + row * m;
    const auto [tm, ti] = row_stats(xr, m, eps, row, mean_out, inv_out);
    if (b)
      for (int64_t k = 0; k < m; ++k) yr[k] = (xr[k] - tm) * ti * s[k] + b[k];
    else
      for (int64_t k = 0; k < m; ++k) yr[k] = (xr[k] - tm) * ti * s[k];
  }
}
}  // namespace

void LayerNormalization(const KernelArgs& a) {
  const auto& p = a.p<ops::LayerNormalizationParams>();
  const TensorView &x = a.in[0], &scale = a.in[1], &out = a.out[0];
  const TensorView* bias = a.in.size() > 2 && a.in[2].present() ? &a.in[2] : nullptr;
  const TensorView* mean_out = a.out.size() > 1 && a.out[1].present() ? &a.out[1] : nullptr;
  const TensorView* inv_out = a.out.size() > 2 && a.out[2].present() ? &a.out[2] : nullptr;
  const int64_t r = x.rank(), axis = norm_axis(p.axis, r);
  int64_t outer = 1, m = 1;
  for (int64_t d = 0; d < r; ++d) (d < axis ? outer : m) *= x.dims[static_cast<size_t>(d)];
  const int64_t* norm = x.dims.data() + axis;
  const bool scale_full = scale.numel() == m, bias_full = !bias || bias->numel() == m;
  const double eps = p.epsilon;
  dispatch_float(x.dtype, [&]<class T>(Tag<T>) {
    const T* xs = x.ptr<const T>();
    const T* s = scale.ptr<const T>();
    const T* b = bias ? bias->ptr<const T>() : nullptr;
    T* y = out.ptr<T>();
    float* mo = mean_out ? mean_out->ptr<float>() : nullptr;
    float* io = inv_out ? inv_out->ptr<float>() : nullptr;
    // Row `row` normalised into yr where scale or bias broadcast within the row.
    auto row_bcast = [&](int64_t row, T* yr) {
      const T* xr = xs + row * m;
      const auto [tm, ti] = row_stats(xr, m, eps, row, mo, io);
      for (int64_t k = 0; k < m; ++k) {
        T sk = scale_full ? s[k] : s[bcast_index(scale, norm, r - axis, k)];
        T bk = !b ? T(0) : bias_full ? b[k] : b[bcast_index(*bias, norm, r - axis, k)];
        yr[k] = (xr[k] - tm) * ti * sk + bk;
      }
    };
    if constexpr (std::is_same_v<T, float>) {
      if (out.bf16_storage) {  // Y only bf16 products read (assign_bf16_operands): rounded
        auto* y16 = static_cast<uint16_t*>(out.data);
        parallel(outer, m * 3, [&](int64_t rb, int64_t re) {
          float* yr = scratch<float, 22>(m);  // one row in f32, then rounded
          for (int64_t row = rb; row < re; ++row) {
            if (scale_full && bias_full)
              rows_full<float>(xs + row * m, s, b, yr, m, 0, 1, eps, mo ? mo + row : nullptr,
                               io ? io + row : nullptr);
            else
              row_bcast(row, yr);
            round_bf16(yr, m, 1, m, y16 + row * m);
          }
        });
        return;
      }
    }
    CB_CHECK(!out.bf16_storage);
    if (scale_full && bias_full) {  // the usual case: scale and bias over the whole row
      parallel(outer, m * 3,
               [&](int64_t rb, int64_t re) { rows_full<T>(xs, s, b, y, m, rb, re, eps, mo, io); });
      return;
    }
    parallel(outer, m * 3, [&](int64_t rb, int64_t re) {
      for (int64_t row = rb; row < re; ++row) row_bcast(row, y + row * m);
    });
  });
}

}  // namespace cb::cpu
