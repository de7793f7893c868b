// Resize and its adjoint on the CPU, as separable maps (kernels/cpu/separable.h): per axis, the
// taps of every output index (geom::resize_taps, kernels/common/geometry.h: nearest one source
// index, linear the two neighbours, cubic four). ResizeGrad applies the transposed taps to dY:
// each dX element gathers the dY elements that read it, same weights.
#include "kernels/common/geometry.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/separable.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using P = ops::ResizeParams;

// Taps of output indices [0, out) along an axis of `in` elements (kernels/common/geometry.h).
void resize_taps(const geom::ResizeRule& r, int64_t in, int64_t out, double s, AxisTaps& t) {
  t.reset();
  int64_t idx[geom::kMaxResizeTaps];
  double w[geom::kMaxResizeTaps];
  for (int64_t o = 0; o < out; ++o) {
    const int n = geom::resize_taps(r, in, out, s, o, idx, w);
    for (int k = 0; k < n; ++k) t.add(idx[k], w[k]);
    t.next();
  }
}

// Forward taps of every axis (destination: Y's dims; source: X's dims).
std::vector<AxisTaps>& forward_taps(const P& p, const std::vector<int64_t>& x_dims,
                                    const std::vector<int64_t>& y_dims) {
  thread_local std::vector<AxisTaps> taps;
  CB_CHECK(x_dims.size() == y_dims.size() && p.scales.size() == x_dims.size());
  taps.resize(x_dims.size());
  const geom::ResizeRule rule = geom::resize_rule(p);
  for (size_t d = 0; d < x_dims.size(); ++d)
    resize_taps(rule, x_dims[d], y_dims[d], p.scales[d], taps[d]);
  return taps;
}
}  // namespace

// Resize(X, ...) -> Y: Y = taps(X).
void Resize(const KernelArgs& a) {
  const TensorView &X = a.in[0], &Y = a.out[0];
  const auto& taps = forward_taps(a.p<P>(), X.dims, Y.dims);
  dispatch_float(Y.dtype, [&]<class T>(Tag<T>) { apply_separable<T>(taps.data(), X, Y); });
}

// ResizeGrad(dY, x_shape) -> dX = taps^T(dY).
void ResizeGrad(const KernelArgs& a) {
  const TensorView &dY = a.in[0], &dX = a.out[0];
  const auto& fwd = forward_taps(a.p<P>(), dX.dims, dY.dims);
  thread_local std::vector<AxisTaps> adj;
  adj.resize(fwd.size());
  for (size_t d = 0; d < fwd.size(); ++d) transpose_taps(fwd[d], dX.dims[d], adj[d]);
  dispatch_float(dX.dtype, [&]<class T>(Tag<T>) { apply_separable<T>(adj.data(), dY, dX); });
}

}  // namespace cb::cpu
