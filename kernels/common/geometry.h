// Kernel geometry written once for every backend: how an op's attributes and tensor dims become
// the index plans its kernels walk (strided copies, padding, sliding windows, resize taps, Gemm's
// C broadcast, the softmax view, SmaStep's buffers). Plain structs and functions: the host side
// builds a plan, and a kernel body (a CPU loop or a CUDA thread) reads it. Functions a kernel body
// calls are CB_HOST_DEVICE and take only PODs; the rest run on the host, check what they are
// given and fail with the op's name (cb::Error) on what the kernels cannot run.
// Conventions: dims are row-major; spatial windows are padded to 3-D with leading unit dims
// ([depth, height, width]), so one loop nest serves 1-D to 3-D.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/scalar_math.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/params.h"

namespace cb::geom {

// ---- dims and strides ---------------------------------------------------------------------------
// The product of dims [b, e).
inline int64_t prod(const std::vector<int64_t>& dims, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= dims[i];
  return p;
}

// Contiguous (row-major) element strides of `dims` into st[0, rank).
inline void contiguous_strides(const std::vector<int64_t>& dims, int64_t* st) {
  int64_t acc = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    st[d] = acc;
    acc *= dims[d];
  }
}

// ---- strided copies ----------------------------------------------------------------------------
// out[i...] = in[base + sum_d i_d * st_d].
// Strides may be 0 (broadcast) or step more than one element (Slice's steps, Transpose).
// Room for twice the IR's rank: the CPU's Tile views its output as [r_0, d_0, r_1, d_1, ...].
constexpr int kMaxStridedRank = 2 * static_cast<int>(kMaxRank);

struct StridedPlan {
  int rank = 0;
  int64_t base = 0;
  int64_t dims[kMaxStridedRank] = {}, strides[kMaxStridedRank] = {};

  // The input offset of flat output index i.
  CB_HOST_DEVICE int64_t offset(int64_t i) const {
    int64_t off = base;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return off;
  }
  // One contiguous run: a plain copy from `base`.
  CB_HOST_DEVICE bool contiguous() const { return rank == 1 && strides[0] == 1; }
};

// Drops dims of size 1 and merges runs whose strides are contiguous with each other, so that a
// copy walks as few (and as long) runs as possible. Never rank 0: a scalar is one run of 1.
inline StridedPlan collapse_strided(const char* op, const std::vector<int64_t>& dims,
                                    const int64_t* strides, int64_t base) {
  if (dims.size() > static_cast<size_t>(kMaxStridedRank))
    fail("{}: strided copies support rank <= {}, got {}", op, kMaxStridedRank, dims.size());
  StridedPlan s;
  s.base = base;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (s.rank > 0 && s.strides[s.rank - 1] == strides[d] * dims[d]) {
      s.dims[s.rank - 1] *= dims[d];
      s.strides[s.rank - 1] = strides[d];
      continue;
    }
    s.dims[s.rank] = dims[d];
    s.strides[s.rank] = strides[d];
    ++s.rank;
  }
  if (s.rank == 0) s.dims[0] = 1, s.strides[0] = 1, s.rank = 1;
  return s;
}

// Transpose: output dim i reads input dim perm[i] (st: one per output dim).
inline void transpose_strides(const char* op, const ops::TransposeParams& p,
                              const std::vector<int64_t>& in_dims, int64_t* st) {
  if (in_dims.size() > kMaxRank || p.perm.size() != in_dims.size())
    fail("{}: perm has {} entries for rank {} (at most {})", op, p.perm.size(), in_dims.size(),
         kMaxRank);
  int64_t in_st[kMaxRank];
  contiguous_strides(in_dims, in_st);
  for (size_t i = 0; i < p.perm.size(); ++i) st[i] = in_st[p.perm[i]];
}

// Expand: `in` right-aligned against `out_rank` dims; missing and unit dims get stride 0.
// LayoutReorder of X [N, C, H, W] (C a multiple of 16) as one strided copy: the output's dims
// in memory order (blocked [N, C/16, H, W, 16], or plain [N, C/16, 16, H, W]) and, for each, the
// input's element stride.
inline std::vector<int64_t> layout_reorder_strides(const std::vector<int64_t>& x, bool to_blocked,
                                                   int64_t* st) {
  const int64_t n = x.at(0), cb = x.at(1) / 16, h = x.at(2), w = x.at(3);
  if (to_blocked) {  // read plain: c = 16 cb + l at ((n C + c) H + y) W + x
    const int64_t v[5] = {cb * 16 * h * w, 16 * h * w, w, 1, h * w};
    std::copy(v, v + 5, st);
    return {n, cb, h, w, 16};
  }
  const int64_t v[5] = {cb * h * w * 16, h * w * 16, 1, w * 16, 16};  // read blocked
  std::copy(v, v + 5, st);
  return {n, cb, 16, h, w};
}

inline void expand_strides(const char* op, const std::vector<int64_t>& in_dims, size_t out_rank,
                           int64_t* st) {
  if (out_rank > kMaxRank || in_dims.size() > out_rank)
    fail("{}: cannot expand rank {} to rank {} (at most {})", op, in_dims.size(), out_rank,
         kMaxRank);
  int64_t in_st[kMaxRank];
  contiguous_strides(in_dims, in_st);
  const size_t shift = out_rank - in_dims.size();
  for (size_t d = 0; d < out_rank; ++d)
    st[d] = (d < shift || in_dims[d - shift] == 1) ? 0 : in_st[d - shift];
}

// Slice (and SliceGrad, which writes where the forward read): per input dim d the offset of the
// output's index i_d is (dim_start[d] + i_d * dim_step[d]) * contiguous stride of d. Fills
// st[0, rank) and returns the base offset.
inline int64_t slice_strides(const char* op, const ops::SliceParams& p,
                             const std::vector<int64_t>& in_dims, int64_t* st) {
  const size_t r = in_dims.size();
  if (r > kMaxRank || p.dim_start.size() != r || p.dim_step.size() != r)
    fail("{}: {} starts and {} steps for rank {} (at most {})", op, p.dim_start.size(),
         p.dim_step.size(), r, kMaxRank);
  contiguous_strides(in_dims, st);
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) {
    base += p.dim_start[d] * st[d];
    st[d] *= p.dim_step[d];
  }
  return base;
}

// Tile: the output [r_0 * d_0, ...] viewed as [r_0, d_0, r_1, d_1, ...] (r_i = 1 not split) is
// a strided copy of the input with stride 0 along each r_i. Fills the view's dims and st.
inline void tile_view(const char* op, const std::vector<int64_t>& in_dims,
                      const std::vector<int64_t>& out_dims, std::vector<int64_t>& view,
                      int64_t* st) {
  if (in_dims.size() != out_dims.size() || in_dims.size() > kMaxRank)
    fail("{}: input rank {} and output rank {} differ (or exceed {})", op, in_dims.size(),
         out_dims.size(), kMaxRank);
  int64_t in_st[kMaxRank];
  contiguous_strides(in_dims, in_st);
  view.clear();
  for (size_t d = 0; d < in_dims.size(); ++d) {
    const int64_t reps = in_dims[d] == 0 ? 1 : out_dims[d] / in_dims[d];
    if (reps != 1) {
      st[view.size()] = 0;
      view.push_back(reps);
    }
    st[view.size()] = in_st[d];
    view.push_back(in_dims[d]);
  }
}

// ---- Pad ----------------------------------------------------------------------------------------
// Modes as small integers, for kernel bodies: constant, reflect (mirrors without repeating the
// edge, as often as needed), edge (repeats the edge).
constexpr int kPadConstant = 0, kPadReflect = 1, kPadEdge = 2;

inline int pad_mode(const ops::PadParams& p) {
  return p.mode == ops::PadParams::Mode::Reflect ? kPadReflect
         : p.mode == ops::PadParams::Mode::Edge  ? kPadEdge
                                                 : kPadConstant;
}

// Pad's source index along a dim of n elements for output index o with `begin` padding in front,
// or -1 (the constant). Negative begins crop.
CB_HOST_DEVICE inline int64_t pad_source(int mode, int64_t n, int64_t begin, int64_t o) {
  const int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  if (mode == kPadConstant || n == 0) return -1;
  if (mode == kPadEdge) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

// The element of dtype t that Cast would make of the float `v` (Pad's value attribute), as the
// bits of an E of the same size (byte-moving kernels dispatch on the element size only).
template <class E>
E cast_bits(DType t, float v) {
  unsigned char b[sizeof(E)] = {};
  auto put = [&](auto x) {
    static_assert(sizeof(x) <= sizeof(double));
    if (sizeof(x) == sizeof(E)) std::memcpy(b, &x, sizeof(E));
  };
  switch (t) {
    case DType::F32:
      put(math::cast_store<float>(v));
      break;
    case DType::F64:
      put(math::cast_store<double>(v));
      break;
    case DType::F16:
      put(math::cast_store<math::F16Bits>(v));
      break;
    case DType::BF16:
      put(math::cast_store<math::BF16Bits>(v));
      break;
    case DType::I64:
      put(math::cast_store<int64_t>(v));
      break;
    case DType::I32:
      put(math::cast_store<int32_t>(v));
      break;
    case DType::I8:
      put(math::cast_store<int8_t>(v));
      break;
    case DType::U8:
      put(math::cast_store<uint8_t>(v));
      break;
    case DType::Bool:
      put(math::cast_store<bool>(v));
      break;
  }
  E e;
  std::memcpy(&e, b, sizeof(E));
  return e;
}

// ---- sliding windows (Conv, ConvGrad, ConvTranspose, pooling) -----------------------------------
// A 1-D/2-D/3-D window as 3-D: spatial arrays are [depth, height, width] with leading 1s.
struct WindowGeom {
  int nsp = 0;                                              // spatial dims of the op (1 to 3)
  int64_t n = 0, c = 0, m = 0, groups = 1, cg = 0, mg = 0;  // batch, channels in/out, per group
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1};   // strides, dilations
  int64_t p[3] = {0, 0, 0}, pe[3] = {0, 0, 0};  // pads at the beginning, at the end
  // k_vol saturates at INT64_MAX: pooling windows may be far larger than the input (ONNX allows
  // it; the kernels clip them), Conv's never are (they are its weights). clip_vol: the most input
  // positions one window can cover, the work estimate of a pooling window.
  int64_t in_vol = 1, out_vol = 1, k_vol = 1, clip_vol = 1;
  bool pointwise = false;  // 1x1, stride 1, no padding: X is its own im2col
};

// X [N,C,D...], Y [N,M,D'...] with the resolved window `w` (infer() completed pads, strides and
// dilations) and `group` channel groups (1 for pooling). Pads may be negative (ConvTranspose's
// Conv geometry).
inline WindowGeom window_geom(const char* op, const ops::WindowAttrs& w,
                              const std::vector<int64_t>& x, const std::vector<int64_t>& y,
                              int64_t group) {
  if (x.size() < 3 || x.size() > 5 || y.size() != x.size())
    fail("{}: input rank {} / output rank {}: 1 to 3 spatial dims are supported", op, x.size(),
         y.size());
  const size_t r = x.size() - 2;
  if (w.kernel_shape.size() != r || w.pads.size() != 2 * r ||
      (!w.strides.empty() && w.strides.size() != r) ||
      (!w.dilations.empty() && w.dilations.size() != r))
    fail("{}: the window attributes do not match {} spatial dims (kernel_shape {}, pads {})", op, r,
         w.kernel_shape.size(), w.pads.size());
  if (group <= 0 || x[1] % group != 0 || y[1] % group != 0)
    fail("{}: {} input and {} output channels do not split into {} groups", op, x[1], y[1], group);
  WindowGeom g;
  g.nsp = static_cast<int>(r);
  g.n = x[0];
  g.c = x[1];
  g.m = y[1];
  g.groups = group;
  g.cg = g.c / group;
  g.mg = g.m / group;
  for (size_t i = 0; i < r; ++i) {
    const size_t j = 3 - r + i;
    g.in[j] = x[2 + i];
    g.out[j] = y[2 + i];
    g.k[j] = w.kernel_shape[i];
    g.s[j] = w.strides.empty() ? 1 : w.strides[i];
    g.d[j] = w.dilations.empty() ? 1 : w.dilations[i];
    g.p[j] = w.pads[i];
    g.pe[j] = w.pads[i + r];
    if (g.k[j] <= 0 || g.s[j] <= 0 || g.d[j] <= 0)
      fail("{}: kernel {}, stride {}, dilation {} must be positive", op, g.k[j], g.s[j], g.d[j]);
  }
  g.in_vol = g.in[0] * g.in[1] * g.in[2];
  g.out_vol = g.out[0] * g.out[1] * g.out[2];
  for (int j = 0; j < 3; ++j) {
    constexpr int64_t kSat = INT64_MAX;
    g.k_vol = g.k_vol > kSat / g.k[j] ? kSat : g.k_vol * g.k[j];
    g.clip_vol *= g.k[j] < g.in[j] ? g.k[j] : g.in[j];
  }
  // Pads one by one: ConvTranspose's Conv geometry may hold negative end pads.
  g.pointwise = g.k_vol == 1 && g.s[0] == 1 && g.s[1] == 1 && g.s[2] == 1 && g.p[0] == 0 &&
                g.p[1] == 0 && g.p[2] == 0 && g.pe[0] == 0 && g.pe[1] == 0 && g.pe[2] == 0;
  return g;
}

// ceil(a / b) for b > 0, and 0 for a <= 0; no a + b - 1 to overflow with strides near 2^63.
CB_HOST_DEVICE inline int64_t ceil_div_pos(int64_t a, int64_t b) {
  return a > 0 ? (a - 1) / b + 1 : 0;
}

// Output positions [lo, hi) along an axis of `out` whose input column o*s + off lies inside
// [0, in); the others read padding.
CB_HOST_DEVICE inline void valid_range(int64_t off, int64_t s, int64_t in, int64_t out, int64_t& lo,
                                       int64_t& hi) {
  lo = ceil_div_pos(-off, s);
  hi = ceil_div_pos(in - off, s);
  lo = lo < out ? lo : out;
  hi = hi < lo ? lo : hi > out ? out : hi;
}

// The window positions [t0, t1) of [0, k) whose coordinate start + t*dil lies inside [lo, hi):
// a window clipped by arithmetic, so that no loop runs over the positions outside. Windows may be
// far larger than the input (kernel_shape 2^40 with SAME padding is valid ONNX); every pooling
// loop walks [t0, t1) only, as ONNX Runtime does.
CB_HOST_DEVICE inline void window_taps(int64_t start, int64_t k, int64_t dil, int64_t lo,
                                       int64_t hi, int64_t& t0, int64_t& t1) {
  t1 = ceil_div_pos(hi - start, dil);
  t1 = t1 < k ? t1 : k;
  t0 = ceil_div_pos(lo - start, dil);
  t0 = t0 < t1 ? t0 : t1;
}

// Window positions t in [0, k) with start + t*dil inside [lo, hi) (AveragePool's divisor).
CB_HOST_DEVICE inline int64_t count_in(int64_t start, int64_t k, int64_t dil, int64_t lo,
                                       int64_t hi) {
  int64_t t0, t1;
  window_taps(start, k, dil, lo, hi, t0, t1);
  return t1 - t0;
}

// Output position o of a plane -> its window's start along each axis.
CB_HOST_DEVICE inline void window_start(const WindowGeom& g, int64_t o, int64_t st[3]) {
  const int64_t ow = o % g.out[2], oh = (o / g.out[2]) % g.out[1], od = o / (g.out[2] * g.out[1]);
  st[0] = od * g.s[0] - g.p[0];
  st[1] = oh * g.s[1] - g.p[1];
  st[2] = ow * g.s[2] - g.p[2];
}

// The outputs [lo, hi) along axis `ax` whose windows may cover input position i; of those, the
// ones with (i + p - o*s) a multiple of d cover it (covers()).
CB_HOST_DEVICE inline void covering(const WindowGeom& g, int ax, int64_t i, int64_t& lo,
                                    int64_t& hi) {
  const int64_t t = i + g.p[ax] - (g.k[ax] - 1) * g.d[ax];
  lo = ceil_div_pos(t, g.s[ax]);
  hi = (i + g.p[ax]) / g.s[ax] + 1;
  hi = hi < g.out[ax] ? hi : g.out[ax];
}
CB_HOST_DEVICE inline bool covers(const WindowGeom& g, int ax, int64_t i, int64_t o) {
  return (i + g.p[ax] - o * g.s[ax]) % g.d[ax] == 0;
}

// Calls f(at) with the plane offset `at` of every position of the window starting at st that lies
// inside the input, in window order (kd, kh, kw); positions outside are never visited.
template <class F>
CB_HOST_DEVICE inline void for_each_in_window(const WindowGeom& g, const int64_t st[3], F&& f) {
  int64_t t0[3], t1[3];
  for (int ax = 0; ax < 3; ++ax) window_taps(st[ax], g.k[ax], g.d[ax], 0, g.in[ax], t0[ax], t1[ax]);
  for (int64_t kd = t0[0]; kd < t1[0]; ++kd) {
    const int64_t id = st[0] + kd * g.d[0];
    for (int64_t kh = t0[1]; kh < t1[1]; ++kh) {
      const int64_t row = (id * g.in[1] + st[1] + kh * g.d[1]) * g.in[2] + st[2];
      for (int64_t kw = t0[2]; kw < t1[2]; ++kw) f(row + kw * g.d[2]);
    }
  }
}

// AveragePool's divisor, separable: along axis ax, the positions of the window starting at
// `start` inside the input, or with count_include_pad inside the padded input; a window's divisor
// is the product over the three axes (avg_pool_divisor), a double: windows of 2^40 per axis with
// count_include_pad have 2^80 or more positions (exact below 2^53, as the int64 product was).
CB_HOST_DEVICE inline int64_t avg_pool_factor(const WindowGeom& g, int ax, int64_t start,
                                              bool include_pad) {
  return include_pad ? count_in(start, g.k[ax], g.d[ax], -g.p[ax], g.in[ax] + g.pe[ax])
                     : count_in(start, g.k[ax], g.d[ax], 0, g.in[ax]);
}
CB_HOST_DEVICE inline double avg_pool_divisor(const WindowGeom& g, const int64_t st[3],
                                              bool include_pad) {
  return static_cast<double>(avg_pool_factor(g, 0, st[0], include_pad)) *
         static_cast<double>(avg_pool_factor(g, 1, st[1], include_pad)) *
         static_cast<double>(avg_pool_factor(g, 2, st[2], include_pad));
}

// MaxPool's order: v replaces the maximum so far when greater; NaN propagates, as in PyTorch.
template <class T>
CB_HOST_DEVICE inline bool pool_greater(T v, T best) {
  if constexpr (math::kIsFloat<T>)
    return v > best || (v != v && best == best);
  else
    return v > best;
}

// ---- Resize taps --------------------------------------------------------------------------------
// Per axis, the taps of an output index: source indices and weights. Nearest: one tap; linear:
// the two neighbours of the source coordinate, clamped to the input, weights 1 - f and f; cubic:
// four (Keys). Coordinates and rounding follow runtime/ops/resize.cpp.
using RP = ops::ResizeParams;

struct ResizeRule {
  RP::Mode mode = RP::Mode::Nearest;
  RP::Coord coord = RP::Coord::HalfPixel;
  RP::Nearest nearest = RP::Nearest::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

inline ResizeRule resize_rule(const RP& p) {
  return {p.mode, p.coord, p.nearest, p.cubic_a, p.exclude_outside};
}

// The source coordinate of output index o along an axis of `in` -> `out` elements, scale s.
// The resized length in align_corners and pytorch_half_pixel is in * s, unfloored (the ONNX
// reference's: 4 -> 2 elements with scale 0.6 maps output 1 to 3 / 1.4, not 3).
CB_HOST_DEVICE inline double resize_source(const ResizeRule& r, int64_t o, int64_t in, int64_t out,
                                           double s) {
  const double x = static_cast<double>(o);
  double len = static_cast<double>(in) * s;
  if (fabs(len - static_cast<double>(out)) < 1e-9 * (len > 1 ? len : 1.0))
    len = static_cast<double>(out);  // sizes given (s = out / in): exactly out
  switch (r.coord) {
    case RP::Coord::HalfPixel:
      return (x + 0.5) / s - 0.5;
    case RP::Coord::PytorchHalfPixel:
      return len > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case RP::Coord::AlignCorners:
      return len == 1 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
    case RP::Coord::Asymmetric:
      return x / s;
    case RP::Coord::TfHalfPixelForNN:
      return (x + 0.5) / s;
  }
  return x;
}

CB_HOST_DEVICE inline int64_t resize_nearest(const ResizeRule& r, double x, double s) {
  switch (r.nearest) {
    case RP::Nearest::RoundPreferFloor:
      return static_cast<int64_t>(ceil(x - 0.5));
    case RP::Nearest::RoundPreferCeil:
      return static_cast<int64_t>(floor(x + 0.5));
    case RP::Nearest::Floor:
      return static_cast<int64_t>(floor(x));
    case RP::Nearest::Ceil:
      return static_cast<int64_t>(ceil(x));
    case RP::Nearest::Simple:
      return static_cast<int64_t>(s < 1 ? ceil(x) : floor(x));
  }
  return 0;
}

CB_HOST_DEVICE inline int64_t clamp_index(int64_t i, int64_t lo, int64_t hi) {
  return i < lo ? lo : hi < i ? hi : i;
}

// Keys' cubic weights: |d| <= 1: (a+2)|d|^3 - (a+3)|d|^2 + 1; 1 < |d| < 2: a|d|^3 - 5a|d|^2 +
// 8a|d| - 4a.
CB_HOST_DEVICE inline double cubic_near(double a, double d) {
  return ((a + 2) * d - (a + 3)) * d * d + 1;
}
CB_HOST_DEVICE inline double cubic_far(double a, double d) {
  return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
}

constexpr int kMaxResizeTaps = 4;

// Taps of output index o along an axis of `in` -> `out` elements, scale s: source indices idx and
// weights w (at most kMaxResizeTaps); returns their count.
CB_HOST_DEVICE inline int resize_taps(const ResizeRule& r, int64_t in, int64_t out, double s,
                                      int64_t o, int64_t* idx, double* w) {
  const double x = resize_source(r, o, in, out, s);
  if (r.mode == RP::Mode::Nearest) {
    idx[0] = clamp_index(resize_nearest(r, x, s), 0, in - 1);
    w[0] = 1;
    return 1;
  }
  if (r.mode == RP::Mode::Cubic) {
    // Taps i0-1 .. i0+2 around x = i0 + f with Keys' weights (a = cubic_coeff_a). As the ONNX
    // reference: an integer x is taken as i0 = x - 1, f = 1; indices outside the input repeat the
    // edge, or with exclude_outside get weight 0 and the others are renormalised.
    const double a = r.cubic_a;
    auto i0 = static_cast<int64_t>(floor(x));
    double f = x - static_cast<double>(i0);
    if (f == 0) {
      f = 1;
      i0 -= 1;
    }
    const double cw[4] = {cubic_far(a, f + 1), cubic_near(a, f), cubic_near(a, 1 - f),
                          cubic_far(a, 2 - f)};
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 - 1 + k;
      if (!r.exclude_outside || (i >= 0 && i < in)) sum += cw[k];
    }
    int n = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = i0 - 1 + k;
      if (r.exclude_outside && (i < 0 || i >= in)) continue;
      idx[n] = clamp_index(i, 0, in - 1);
      w[n] = r.exclude_outside ? cw[k] / sum : cw[k];
      ++n;
    }
    return n;
  }
  const double hi = static_cast<double>(in - 1);
  const double cx = x < 0.0 ? 0.0 : hi < x ? hi : x;
  const auto i0 = static_cast<int64_t>(floor(cx));
  const double f = cx - static_cast<double>(i0);
  idx[0] = i0;
  w[0] = 1 - f;
  if (!(f > 0)) return 1;
  idx[1] = i0 + 1 < in - 1 ? i0 + 1 : in - 1;
  w[1] = f;
  return 2;
}

// ---- Gemm's C -----------------------------------------------------------------------------------
// C (rank 0 to 2) broadcast to Y [M,N]: Y[i,j] reads C[i * sm + j * sn].
struct GemmC {
  int64_t sm = 0, sn = 0;
};
inline GemmC gemm_c(const std::vector<int64_t>& c_dims) {
  GemmC c;
  if (c_dims.size() == 2) {
    c.sm = c_dims[0] == 1 ? 0 : c_dims[1];
    c.sn = c_dims[1] == 1 ? 0 : 1;
  } else if (c_dims.size() == 1) {
    c.sn = c_dims[0] == 1 ? 0 : 1;
  } else if (!c_dims.empty()) {
    fail("Gemm: C must have rank 0 to 2, got {}", c_dims.size());
  }
  return c;
}

// ---- Softmax ------------------------------------------------------------------------------------
// The dims a Softmax/LogSoftmax (or its gradient) works on, viewed as [outer, n, inner] with the
// softmax over n.
struct SoftmaxView {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t rows() const { return outer * inner; }
};
inline SoftmaxView softmax_view(const ops::SoftmaxParams& p, const std::vector<int64_t>& d) {
  const auto axis = static_cast<size_t>(p.axis);  // normalised by infer(); 0 for a scalar
  SoftmaxView v;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i < axis)
      v.outer *= d[i];
    else if (i == axis || p.coerce_2d)
      v.n *= d[i];
    else
      v.inner *= d[i];
  }
  return v;
}

// ---- MaskedSoftmax ------------------------------------------------------------------------------
// X viewed as rows of its last dim n; the mask (rank <= X's, right-aligned, dims 1 or X's)
// broadcast to it: the mask element of row r, column k is at row_offset(r) + k * col_stride.
struct MaskPlan {
  static constexpr int kMaxRank = 8;
  int64_t rows = 1, n = 1;
  int rank = 0;                   // X's leading dims (all but the last)
  int64_t dims[kMaxRank] = {};    // X's leading dims
  int64_t stride[kMaxRank] = {};  // the mask's element stride along them (0: broadcast)
  int64_t col_stride = 0;         // 1, or 0 for a mask whose last dim is 1
  CB_HOST_DEVICE int64_t row_offset(int64_t r) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (r % dims[d]) * stride[d];
      r /= dims[d];
    }
    return off;
  }
};
// x: X's dims (rank >= 1); m: the mask's (empty vector and `has_mask` false: no mask).
inline MaskPlan mask_plan(const std::vector<int64_t>& x, const std::vector<int64_t>& m,
                          bool has_mask) {
  MaskPlan p;
  const size_t r = x.size();
  if (r < 1 || r - 1 > static_cast<size_t>(MaskPlan::kMaxRank))
    fail("MaskedSoftmax: X of rank {} (1 to {} supported)", r, MaskPlan::kMaxRank + 1);
  p.n = x[r - 1];
  p.rank = static_cast<int>(r - 1);
  for (size_t d = 0; d + 1 < r; ++d) p.dims[d] = x[d], p.rows *= x[d];
  if (!has_mask) return p;
  if (m.size() > r) fail("MaskedSoftmax: mask of rank {} for X of rank {}", m.size(), r);
  int64_t st = 1;
  for (size_t i = 0; i < m.size(); ++i) {  // from the last dim
    const size_t md = m.size() - 1 - i, xd = r - 1 - i;
    const bool bcast = m[md] == 1 && x[xd] != 1;
    if (!bcast && m[md] != x[xd]) fail("MaskedSoftmax: mask dim {} against {}", m[md], x[xd]);
    if (i == 0)
      p.col_stride = bcast ? 0 : 1;
    else
      p.stride[xd] = bcast ? 0 : st;
    st *= m[md];
  }
  return p;
}

// ---- SmaStep ------------------------------------------------------------------------------------
// SmaStep's operands, checked: inputs grad [R,P], z? [P]; outputs param, opt1, opt2 [R,P]
// (f32), sum [P], steps i64 [R], norms? [R], ema? [P]. Learner r's element j sits at r * n + j;
// buffers the step does not use are null (opt1 without momentum, opt2 without AdamW, z and sum
// without a pull).
struct SmaStepPlan {
  float* w = nullptr;
  const float* g = nullptr;
  float* o1 = nullptr;
  float* o2 = nullptr;
  const float* z = nullptr;
  float* sum = nullptr;
  int64_t* steps = nullptr;
  float* norms = nullptr;  // [rows]: each row's gradient norm, when asked for
  float* ema = nullptr;    // [n]: the weight average of the rows' mean, when asked for
  float clip = 0;          // above 0: the gradient norm each row is clipped to
  int64_t n = 0, rows = 0;
  bool adamw = false, momentum = false, pull = false;
};

inline SmaStepPlan sma_step_plan(const KernelArgs& a) {
  const auto& p = a.p<ops::SmaStepParams>();
  const TensorView& grad = a.in.at(0);
  const TensorView* zv = a.in.size() > 1 && a.in[1].present() ? &a.in[1] : nullptr;
  const TensorView &param = a.out.at(0), &o1v = a.out.at(1), &o2v = a.out.at(2), &sv = a.out.at(3),
                   &steps = a.out.at(4);
  SmaStepPlan s;
  s.rows = steps.numel();
  if (steps.dtype != DType::I64 || s.rows < 1 || param.numel() % s.rows != 0)
    fail("SmaStep: steps must be i64 [R] with R >= 1 dividing param's {} elements", param.numel());
  s.n = param.numel() / s.rows;
  if (grad.numel() != param.numel() || param.dtype != DType::F32 || grad.dtype != DType::F32)
    fail("SmaStep: grad and param must be f32 [R,P]");
  s.adamw = p.optimizer == ops::OptimizerKind::AdamW;
  s.momentum = s.adamw || p.momentum != 0;
  if (s.momentum && (o1v.numel() != param.numel() || o1v.dtype != DType::F32))
    fail("SmaStep: opt1 must be f32 [R,P]");
  if (s.adamw && (o2v.numel() != param.numel() || o2v.dtype != DType::F32))
    fail("SmaStep: opt2 must be f32 [R,P]");
  s.pull = zv != nullptr && sv.present();
  if (s.pull && (zv->numel() != s.n || sv.numel() != s.n || zv->dtype != DType::F32 ||
                 sv.dtype != DType::F32))
    fail("SmaStep: z and sum must be f32 with P = {} elements", s.n);
  s.w = param.ptr<float>();
  s.g = grad.ptr<float>();
  s.o1 = s.momentum ? o1v.ptr<float>() : nullptr;
  s.o2 = s.adamw ? o2v.ptr<float>() : nullptr;
  s.z = s.pull ? zv->ptr<float>() : nullptr;
  s.sum = s.pull ? sv.ptr<float>() : nullptr;
  s.steps = steps.ptr<int64_t>();
  const TensorView* nv = a.out.size() > 5 && a.out[5].present() ? &a.out[5] : nullptr;
  if (nv && (nv->numel() != s.rows || nv->dtype != DType::F32))
    fail("SmaStep: norms must be f32 [R] with R = {}", s.rows);
  if (!(p.clip_norm >= 0)) fail("SmaStep: clip_norm must not be negative, got {}", p.clip_norm);
  if (p.clip_norm > 0 && !nv) fail("SmaStep: clip_norm needs the norms output");
  s.norms = nv ? nv->ptr<float>() : nullptr;
  s.clip = p.clip_norm;
  const TensorView* ev = a.out.size() > 6 && a.out[6].present() ? &a.out[6] : nullptr;
  if (ev && (ev->numel() != s.n || ev->dtype != DType::F32))
    fail("SmaStep: ema must be f32 with P = {} elements", s.n);
  s.ema = ev ? ev->ptr<float>() : nullptr;
  return s;
}

}  // namespace cb::geom
