// Gradient kernels of the data movement ops that select elements: the gradient goes back to the
// selected positions of a zeroed tensor shaped like the forward's input.
//  - GatherGrad scatter-adds (an index may repeat: embedding rows used twice get both gradients);
//  - SliceGrad writes (a slice selects each input element at most once);
//  - PadGrad sums, per dX element, the dY elements copied from it (reflect and edge copy one
//    element many times): the transposed taps of the forward (kernels/cpu/separable.h).
// Convention: no atomics and no per-thread copies. The work is split over output positions that
// no two tasks share (GatherGrad: the (outer, inner column) pairs, each owning the column of
// every row it touches; SliceGrad: the dY elements, whose targets are distinct), and each output
// element sums its contributions in index order, so results do not depend on the thread count.
#include <algorithm>
#include <cstring>

#include "kernels/common/geometry.h"
#include "kernels/common/kernel_errors.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/separable.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using geom::prod;

void zero(const TensorView& t) {
  if (t.bytes() > 0) std::memset(t.data, 0, t.bytes());
}
}  // namespace

// GatherGrad(dY [.., i..., ..], indices [i...], data_shape) along axis -> dX [.., n, ..]:
// dX[o, idx[k], j] += dY[o, k, j] over the flattened index positions k (negative indices wrap).
void GatherGrad(const KernelArgs& a) {
  const TensorView &dy = a.in[0], &idx = a.in[1], &dx = a.out[0];
  CB_CHECK(dx.rank() >= 1);
  const auto axis = static_cast<size_t>(norm_axis(a.p<ops::GatherParams>().axis, dx.rank()));
  const int64_t outer = prod(dx.dims, 0, axis), n = dx.dims[axis],
                inner = prod(dx.dims, axis + 1, dx.dims.size()), ni = idx.numel();
  CB_CHECK(dy.numel() == outer * ni * inner);
  for (int64_t k = 0; k < ni; ++k) {
    int64_t j = int_at(idx, k);
    if (j < -n || j >= n)
      throw Error(index_out_of_range("GatherGrad", j, static_cast<int64_t>(axis), n));
  }
  zero(dx);
  if (dy.numel() == 0) return;
  dispatch_float(dx.dtype, [&]<class T>(Tag<T>) {
    const T* src = dy.ptr<const T>();
    T* dst = dx.ptr<T>();
    // Task c in [0, outer * inner) is column (c % inner) of outer slice (c / inner).
    parallel(outer * inner, ni, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e;) {
        const int64_t o = c / inner, j0 = c % inner, j1 = std::min(inner, j0 + (e - c));
        for (int64_t k = 0; k < ni; ++k) {
          int64_t r = int_at(idx, k);
          if (r < 0) r += n;
          const T* s = src + (o * ni + k) * inner;
          T* d = dst + (o * n + r) * inner;
          for (int64_t j = j0; j < j1; ++j) d[j] += s[j];
        }
        c += j1 - j0;
      }
    });
  });
}

// SliceGrad(dY [k...], x_shape) -> dX [d...]: zeros, with dY at the positions the forward read:
// along dim d, dim_start[d] + i * dim_step[d] for i in [0, k_d) (SliceParams, resolved by infer).
void SliceGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::SliceParams>();
  const TensorView &dy = a.in[0], &dx = a.out[0];
  const int r = static_cast<int>(dx.rank());
  CB_CHECK(dy.rank() == r);
  // dX element offset of dY's multi-index i: base + sum_d i_d * st[d] (the forward's read).
  int64_t st[kMaxRank] = {};
  const int64_t base = geom::slice_strides("SliceGrad", p, dx.dims, st);
  zero(dx);
  const int64_t total = dy.numel();
  if (total == 0) return;
  const int64_t inner = r > 0 ? dy.dims.back() : 1, inner_st = r > 0 ? st[r - 1] : 1;
  dispatch_bytes(dx.dtype, [&]<class E>(Tag<E>) {
    const E* src = dy.ptr<const E>();
    E* dst = dx.ptr<E>();
    parallel(total / inner, inner, [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {  // one row of dY's last dim
        int64_t off = base, rem = row;
        for (int d = r - 2; d >= 0; --d) {
          const int64_t k = dy.dims[static_cast<size_t>(d)];
          off += (rem % k) * st[d];
          rem /= k;
        }
        const E* s = src + row * inner;
        for (int64_t k = 0; k < inner; ++k) dst[off + k * inner_st] = s[k];
      }
    });
  });
}

// PadGrad(dY) -> dX with PadParams::pads resolved over every dim (begins, then ends).
void PadGrad(const KernelArgs& a) {
  const auto& p = a.p<ops::PadParams>();
  const TensorView &dy = a.in[0], &dx = a.out[0];
  const size_t r = dx.dims.size();
  CB_CHECK(p.pads && p.pads->size() == 2 * r && dy.dims.size() == r);
  const int mode = geom::pad_mode(p);
  thread_local std::vector<AxisTaps> fwd, adj;
  fwd.resize(r);
  adj.resize(r);
  for (size_t d = 0; d < r; ++d) {
    AxisTaps& t = fwd[d];
    t.reset();
    for (int64_t o = 0; o < dy.dims[d]; ++o) {
      const int64_t s = geom::pad_source(mode, dx.dims[d], (*p.pads)[d], o);
      if (s >= 0) t.add(s, 1);
      t.next();
    }
    transpose_taps(t, dx.dims[d], adj[d]);
  }
  dispatch_float(dx.dtype, [&]<class T>(Tag<T>) { apply_separable<T>(adj.data(), dy, dx); });
}

}  // namespace cb::cpu
