// Conv internals shared by conv.cpp, conv_grad.cpp, pool.cpp, pool_grad.cpp and the benchmark
// (tools/bench/conv_bench.cpp): the convolution implementations Conv and ConvGrad choose from.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/common/geometry.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

// The sliding-window geometry (spatial dims padded to 3-D) is kernels/common/geometry.h's.
using geom::valid_range;
using geom::window_geom;
using geom::WindowGeom;

// x [Cg, I0,I1,I2] -> col [Cg*k0*k1*k2, O0*O1*O2] (padding reads 0; conv.cpp).
void im2col(const WindowGeom& g, const float* x, float* col);
void im2col(const WindowGeom& g, const double* x, double* col);

// im2col + GEMM (f32, f64), with direct depthwise and pointwise paths.
void conv_im2col(const KernelArgs& a);

// ConvGrad(dY, X, W) -> dX, dW (either may be absent; dB is ConvGrad's own, not theirs):
// col2im + GEMM (f32, f64; conv_grad.cpp), and oneDNN's backward-data/backward-weights (f32;
// conv_grad_dnnl.cpp, false where it cannot run: the caller then computes dX and dW).
// `weights` false: dX only, whatever out[1] holds (another kernel computes dW).
void conv_grad_im2col(const KernelArgs& a);
bool conv_grad_dnnl(const KernelArgs& a, bool weights = true);

// ConvGrad of a depthwise 3x3 convolution (stride 1 or 2, padding 1) on blocked f32 values:
// dX and dW in one pass (conv_depthwise.cpp). False where it does not apply.
bool conv_grad_depthwise(const KernelArgs& a);

// ConvGrad's dW alone for a pointwise convolution (1x1, no padding, one group, any stride) on
// blocked bf16 values with bf16 products (ConvParams::bf16), on cores with AVX-512 BF16
// (conv_pointwise.cpp). False where it does not apply.
bool conv_grad_pointwise_weights(const KernelArgs& a);

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
// Whether oneDNN runs bf16 convolutions on these cores with optimised kernels (AVX-512 BF16 or
// newer); without them ConvParams::bf16 is computed in f32.
bool dnnl_bf16_available();
// Whether oneDNN has f32 Winograd convolutions on these cores (AVX-512; ConvParams::winograd).
bool dnnl_winograd_available();
// The last-level cache size the kernels assume from now on (ConvGrad's rounds, conv_grad_dnnl.cpp;
// cache_size.cpp), for tests of the paths a smaller cache takes; 0 restores the detected size.
void set_last_level_cache_bytes(int64_t bytes);

// The key of a cached oneDNN convolution primitive (forward or backward): the sub-batch size,
// the input dims, the output channels, the window and `flags` (e.g. has-bias).
using ConvKey = std::array<int64_t, 24>;
ConvKey conv_key(const ops::ConvParams& p, const std::vector<int64_t>& x_dims, int64_t out_channels,
                 int64_t samples, int64_t flags);

}  // namespace cb::cpu
