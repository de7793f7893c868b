// Conv internals shared by conv.cpp, conv_grad.cpp, pool.cpp, pool_grad.cpp and the benchmark
// (tools/bench/conv_bench.cpp): the sliding-window geometry padded to 3-D, and the convolution
// implementations Conv and ConvGrad choose from.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/kernel_args.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

// A 1-D/2-D/3-D window as 3-D: spatial arrays are [depth, height, width] with leading 1s.
struct WindowGeom {
  int64_t n = 0, c = 0, m = 0, groups = 1, cg = 0, mg = 0;  // batch, channels in/out, per group
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1};   // strides, dilations
  int64_t p[3] = {0, 0, 0}, pe[3] = {0, 0, 0};  // pads at the beginning, at the end
  int64_t in_vol = 1, out_vol = 1, k_vol = 1;
  bool pointwise = false;  // 1x1, stride 1, no padding: X is its own im2col
};

// From resolved attributes (infer() completed them) and X [N,C,D...], Y [N,M,D'...] dims.
WindowGeom window_geom(const ops::WindowAttrs& w, const std::vector<int64_t>& x_dims,
                       const std::vector<int64_t>& y_dims, int64_t group);

// Output positions [lo, hi) along the innermost axis whose input column o*s + off lies inside
// [0, in); the others read padding.
inline void valid_range(int64_t off, int64_t s, int64_t in, int64_t out, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = in - off > 0 ? (in - off + s - 1) / s : 0;
  lo = lo < out ? lo : out;
  hi = hi < lo ? lo : hi > out ? out : hi;
}

// x [Cg, I0,I1,I2] -> col [Cg*k0*k1*k2, O0*O1*O2] (padding reads 0; conv.cpp).
void im2col(const WindowGeom& g, const float* x, float* col);
void im2col(const WindowGeom& g, const double* x, double* col);

// im2col + GEMM (f32, f64), with direct depthwise and pointwise paths.
void conv_im2col(const KernelArgs& a);

// ConvGrad(dY, X, W) -> dX, dW (either may be absent; dB is ConvGrad's own, not theirs):
// col2im + GEMM (f32, f64; conv_grad.cpp), and oneDNN's backward-data/backward-weights (f32;
// conv_grad_dnnl.cpp, false where it cannot run: the caller then computes dX and dW).
void conv_grad_im2col(const KernelArgs& a);
bool conv_grad_dnnl(const KernelArgs& a);

// dst[i] += sum over p in [0, parts) of src[p * n + i], i in [0, n), split over the pool:
// how the per-chunk weight gradients of the batch-split ConvGrad paths are combined.
void add_partials(const KernelArgs& a, float* dst, const float* src, int64_t parts, int64_t n);
void add_partials(const KernelArgs& a, double* dst, const double* src, int64_t parts, int64_t n);

// Direct loops for 2-D single-channel inputs (f32, stride 1; conv_c1.cpp): the forward, and
// ConvGrad's dW where no dX is asked for. False where they do not apply.
bool conv_c1(const KernelArgs& a);
bool conv_grad_c1(const KernelArgs& a);

// oneDNN (f32; conv_dnnl.cpp). Returns false where it cannot run the conv (built without
// oneDNN, another dtype, a shape oneDNN has no implementation for): the caller then computes Y.
bool conv_dnnl(const KernelArgs& a);
bool conv_dnnl_available();

// The key of a cached oneDNN convolution primitive (forward or backward): the sub-batch size,
// the input dims, the output channels, the window and `flags` (e.g. has-bias).
using ConvKey = std::array<int64_t, 24>;
ConvKey conv_key(const ops::ConvParams& p, const std::vector<int64_t>& x_dims, int64_t out_channels,
                 int64_t samples, int64_t flags);

}  // namespace cb::cpu
