// MaskedSoftmax and MaskedSoftmaxGrad (f32) over a range of rows, for kernels that run attention
// a block of rows at a time (attention_heads.cpp): the arithmetic, and so the bits, of the ops'
// own kernels (softmax.cpp), which run the same functions over all rows.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/geometry.h"
#include "runtime/kernel_args.h"
#include "runtime/ops/params.h"

namespace cb::cpu {

struct MaskedRowsPlan {
  ops::MaskedSoftmaxParams p;
  geom::MaskPlan pl;
  const void* mask = nullptr;  // bool for the Where kinds, X's type for Add; null without one
  std::vector<int64_t> ends;   // per mask row: one past its last kept element (Where masks)
};
// X of dims x_dims (its rows: every dim but the last) and type x_dtype, the mask as the op reads
// it (null: none). The ops' kernels plan with it too, for f32 and f64; the row functions below
// are f32.
MaskedRowsPlan plan_masked_rows(const std::vector<int64_t>& x_dims, const TensorView* mask,
                                const ops::MaskedSoftmaxParams& p, DType x_dtype);
// Rows [r0, r1) of X: x and y point at row r0 (y may be x).
void masked_softmax_rows(const MaskedRowsPlan& mp, const float* x, float* y, int64_t r0,
                         int64_t r1);
// Rows [r0, r1) of the gradient: dy, y and the result point at row r0; the result goes to dx, or
// rounded to bf16 to dx16 where dx is null.
void masked_softmax_grad_rows(const MaskedRowsPlan& mp, const float* dy, const float* y, float* dx,
                              uint16_t* dx16, int64_t r0, int64_t r1);

}  // namespace cb::cpu
