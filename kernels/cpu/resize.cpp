// Resize and its adjoint on the CPU, as separable maps (kernels/cpu/separable.h): per axis, the
// taps of every output index (nearest: one source index, weight 1; linear: the two neighbours of
// the source coordinate, clamped to the input, weights 1 - f and f; cubic: four, cubic_taps).
// ResizeGrad applies the transposed taps to dY: each dX element gathers the dY elements that read
// it, same weights. Coordinates and rounding follow runtime/ops/resize.cpp (ResizeParams, scales
// resolved).
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/separable.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

namespace {
using P = ops::ResizeParams;

// The source coordinate of output index o along an axis of `in` -> `out` elements, scale s.
// The resized length in align_corners and pytorch_half_pixel is in * s, unfloored (the ONNX
// reference's: 4 -> 2 elements with scale 0.6 maps output 1 to 3 / 1.4, not 3).
double source_coord(const P& p, int64_t o, int64_t in, int64_t out, double s) {
  const double x = static_cast<double>(o);
  double len = static_cast<double>(in) * s;
  if (std::abs(len - static_cast<double>(out)) < 1e-9 * std::max<double>(1, len))
    len = static_cast<double>(out);  // sizes given (s = out / in): exactly out
  switch (p.coord) {
    case P::Coord::HalfPixel:
      return (x + 0.5) / s - 0.5;
    case P::Coord::PytorchHalfPixel:
      return len > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case P::Coord::AlignCorners:
      return len == 1 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
    case P::Coord::Asymmetric:
      return x / s;
    case P::Coord::TfHalfPixelForNN:
      return (x + 0.5) / s;
  }
  return x;
}

int64_t nearest_index(const P& p, double x, double s) {
  switch (p.nearest) {
    case P::Nearest::RoundPreferFloor:
      return static_cast<int64_t>(std::ceil(x - 0.5));
    case P::Nearest::RoundPreferCeil:
      return static_cast<int64_t>(std::floor(x + 0.5));
    case P::Nearest::Floor:
      return static_cast<int64_t>(std::floor(x));
    case P::Nearest::Ceil:
      return static_cast<int64_t>(std::ceil(x));
    case P::Nearest::Simple:
      return static_cast<int64_t>(s < 1 ? std::ceil(x) : std::floor(x));
  }
  return 0;
}

// Cubic: taps i0-1 .. i0+2 around x = i0 + f with Keys' weights (a = cubic_coeff_a). As the ONNX
// reference: an integer x is taken as i0 = x - 1, f = 1; indices outside the input repeat the
// edge, or with exclude_outside get weight 0 and the others are renormalised.
void cubic_taps(const P& p, double x, int64_t in, AxisTaps& t) {
  const double a = p.cubic_a;
  auto i0 = static_cast<int64_t>(std::floor(x));
  double f = x - static_cast<double>(i0);
  if (f == 0) {
    f = 1;
    i0 -= 1;
  }
  // |d| <= 1: (a+2)|d|^3 - (a+3)|d|^2 + 1; 1 < |d| < 2: a|d|^3 - 5a|d|^2 + 8a|d| - 4a
  auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
  auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
  const double w[4] = {far(f + 1), near(f), near(1 - f), far(2 - f)};
  double sum = 0;
  for (int k = 0; k < 4; ++k) {
    const int64_t i = i0 - 1 + k;
    if (!p.exclude_outside || (i >= 0 && i < in)) sum += w[k];
  }
  for (int k = 0; k < 4; ++k) {
    const int64_t i = i0 - 1 + k;
    if (p.exclude_outside && (i < 0 || i >= in)) continue;
    t.add(std::clamp<int64_t>(i, 0, in - 1), p.exclude_outside ? w[k] / sum : w[k]);
  }
}

// Taps of output indices [0, out) along an axis of `in` elements.
void resize_taps(const P& p, int64_t in, int64_t out, double s, AxisTaps& t) {
  t.reset();
  for (int64_t o = 0; o < out; ++o) {
    const double x = source_coord(p, o, in, out, s);
    if (p.mode == P::Mode::Nearest) {
      t.add(std::clamp<int64_t>(nearest_index(p, x, s), 0, in - 1), 1);
    } else if (p.mode == P::Mode::Cubic) {
      cubic_taps(p, x, in, t);
    } else {
      const double c = std::clamp(x, 0.0, static_cast<double>(in - 1));
      const auto i0 = static_cast<int64_t>(std::floor(c));
      const double f = c - static_cast<double>(i0);
      t.add(i0, 1 - f);
      if (f > 0) t.add(std::min(i0 + 1, in - 1), f);
    }
    t.next();
  }
}

// Forward taps of every axis (destination: Y's dims; source: X's dims).
std::vector<AxisTaps>& forward_taps(const P& p, const std::vector<int64_t>& x_dims,
                                    const std::vector<int64_t>& y_dims) {
  thread_local std::vector<AxisTaps> taps;
  CB_CHECK(x_dims.size() == y_dims.size() && p.scales.size() == x_dims.size());
  taps.resize(x_dims.size());
  for (size_t d = 0; d < x_dims.size(); ++d)
    resize_taps(p, x_dims[d], y_dims[d], p.scales[d], taps[d]);
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
