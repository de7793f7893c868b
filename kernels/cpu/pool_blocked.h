// MaxPool, AveragePool and their gradients on 2-D values in oneDNN's blocked layout [N, C/16, H, W,
// 16] (TensorView::blocked, runtime/passes.h's assign_blocked_layouts), stored as f32 or bf16
// (storage.h): the 16 channels of a block side by side, one vector per window position. Same
// rules as the plain kernels (pool.cpp, pool_grad.cpp): window order (kh, kw), the first maximum
// wins, NaN wins, padding never wins; a window wholly in padding gives the lowest value forward
// and passes nothing back. The gradient sums each input position's shares in output order in
// f32 and rounds once, so its bits are the plain kernel's (then a reorder's) in f32 and in bf16.
// AveragePool sums each window in f32 in window order and divides by the plain kernel's divisor;
// its gradient adds dY / divisor to each window's positions in output order, in f32 (rounded once
// for bf16 storage): the plain kernels' bits, lane by lane.
#pragma once

#include "kernels/cpu/conv.h"
#include "runtime/kernel_args.h"

namespace cb::cpu {

// X [N,C,H,W] and Y [N,C,OH,OW] both blocked; g: the plain kernels' geometry (2-D).
void max_pool_blocked(const WindowGeom& g, const TensorView& X, const TensorView& Y);
// dY [N,C,OH,OW], X [N,C,H,W] -> dX [N,C,H,W], all blocked.
void max_pool_grad_blocked(const WindowGeom& g, const TensorView& dY, const TensorView& X,
                           const TensorView& dX);

// AveragePool: X [N,C,H,W] -> Y [N,C,OH,OW]; its gradient dY -> dX [N,C,H,W]; all blocked.
void average_pool_blocked(const WindowGeom& g, bool include_pad, const TensorView& X,
                          const TensorView& Y);
void average_pool_grad_blocked(const WindowGeom& g, bool include_pad, const TensorView& dY,
                               const TensorView& dX);

}  // namespace cb::cpu
