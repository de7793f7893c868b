// The case table of the op harness (tests/test_backend_ops.cpp): for every op, a function giving
// its cases for one dtype, and the exclusions. The case type is in tests/backend_ops/case.h; the
// case functions are in one file per kernel family (tests/backend_ops/<family>.h, the families
// of kernels/cuda: elementwise, data_movement, reduce, norm_pool, conv_gemm for library.cu's
// ops, optimizer).
#pragma once

#include <vector>

#include "tests/backend_ops/attention.h"
#include "tests/backend_ops/case.h"
#include "tests/backend_ops/conv_gemm.h"
#include "tests/backend_ops/data_movement.h"
#include "tests/backend_ops/elementwise.h"
#include "tests/backend_ops/norm_pool.h"
#include "tests/backend_ops/optimizer.h"
#include "tests/backend_ops/reduce.h"

namespace cb::test::bops {

// ---- the table: every op with cases, in the catalog's order -------------------------------------
struct OpCases {
  OpKind op;
  CaseFn cases;
};
inline const std::vector<OpCases>& case_table() {
  static const std::vector<OpCases> t = {
      {OpKind::Abs, unary},
      {OpKind::Add, binary},
      {OpKind::And, logical},
      {OpKind::AttentionHeads, attention_heads},
      {OpKind::AveragePool, average_pool},
      {OpKind::BatchNormalization, batch_norm},
      {OpKind::Cast, cast},
      {OpKind::Ceil, unary},
      {OpKind::Clip, clip},
      {OpKind::Concat, concat},
      {OpKind::Constant, constant},
      {OpKind::ConstantOfShape, constant_of_shape},
      {OpKind::Conv, conv},
      {OpKind::ConvTranspose, conv_transpose},
      {OpKind::Div, binary},
      {OpKind::Dropout, dropout},
      {OpKind::Equal, equal},
      {OpKind::Erf, unary},
      {OpKind::Exp, unary},
      {OpKind::Expand, expand},
      {OpKind::Flatten, flatten},
      {OpKind::Floor, unary},
      {OpKind::Gather, gather},
      {OpKind::Gemm, gemm},
      {OpKind::GlobalAveragePool, global_average_pool},
      {OpKind::Greater, compare},
      {OpKind::GreaterOrEqual, compare},
      {OpKind::HardSigmoid, unary},
      {OpKind::HardSwish, unary},
      {OpKind::Gelu, unary},
      {OpKind::Identity, identity},
      {OpKind::LayerNormalization, layer_norm},
      {OpKind::LeakyRelu, unary},
      {OpKind::Less, compare},
      {OpKind::LessOrEqual, compare},
      {OpKind::Log, unary},
      {OpKind::LogSoftmax, softmax},
      {OpKind::MaskedSoftmax, masked_softmax},
      {OpKind::MatMul, matmul},
      {OpKind::Max, variadic},
      {OpKind::MaxPool, max_pool},
      {OpKind::Mean, variadic},
      {OpKind::Min, variadic},
      {OpKind::Mul, binary},
      {OpKind::Neg, unary},
      {OpKind::Not, logical},
      {OpKind::Or, logical},
      {OpKind::Pad, pad},
      {OpKind::Pow, pow_cases},
      {OpKind::Range, range},
      {OpKind::Reciprocal, unary},
      {OpKind::ReduceL1, reduce},
      {OpKind::ReduceL2, reduce},
      {OpKind::ReduceLogSum, reduce},
      {OpKind::ReduceLogSumExp, reduce},
      {OpKind::ReduceMax, reduce},
      {OpKind::ReduceMean, reduce},
      {OpKind::ReduceMin, reduce},
      {OpKind::ReduceProd, reduce},
      {OpKind::ReduceSum, reduce},
      {OpKind::ReduceSumSquare, reduce},
      {OpKind::Relu, unary},
      {OpKind::Reshape, reshape},
      {OpKind::Resize, resize},
      {OpKind::Shape, shape},
      {OpKind::Sigmoid, unary},
      {OpKind::Slice, slice},
      {OpKind::Softmax, softmax},
      {OpKind::SoftmaxCrossEntropyLoss, sce_loss},
      {OpKind::Split, split},
      {OpKind::Sqrt, unary},
      {OpKind::Squeeze, squeeze},
      {OpKind::Sub, binary},
      {OpKind::Sum, variadic},
      {OpKind::Tanh, unary},
      {OpKind::Tile, tile},
      {OpKind::Transpose, transpose},
      {OpKind::Unsqueeze, unsqueeze},
      {OpKind::Upsample, upsample},
      {OpKind::Where, where},
      {OpKind::Xor, logical},
      // internal: gradients
      {OpKind::AveragePoolGrad, average_pool_grad},
      {OpKind::BatchNormalizationGrad, batch_norm_grad},
      {OpKind::ClipGrad, clip_grad},
      {OpKind::ConvGrad, conv_grad},
      {OpKind::DropoutGrad, dropout_grad},
      {OpKind::GatherGrad, gather_grad},
      {OpKind::HardSigmoidGrad, hard_sigmoid_grad},
      {OpKind::HardSwishGrad, hard_sigmoid_grad},
      {OpKind::GeluGrad, gelu_grad},
      {OpKind::LayerNormalizationGrad, layer_norm_grad},
      {OpKind::LayoutReorder, layout_reorder},
      {OpKind::LeakyReluGrad, leaky_relu_grad},
      {OpKind::LogSoftmaxGrad, softmax_grad},
      {OpKind::MaskedSoftmaxGrad, masked_softmax},
      {OpKind::MaxPoolGrad, max_pool_grad},
      {OpKind::PadGrad, pad_grad},
      {OpKind::ReduceSumTo, reduce_sum_to},
      {OpKind::ReluGrad, relu_grad},
      {OpKind::ResizeGrad, resize_grad},
      {OpKind::SliceGrad, slice_grad},
      {OpKind::SoftmaxCrossEntropyLossGrad, sce_loss_grad},
      {OpKind::SoftmaxGrad, softmax_grad},
      // internal: optimizer and SMA steps (last: their contracts are about to change)
      {OpKind::AdamWStep, adamw_step},
      {OpKind::SgdStep, sgd_step},
      {OpKind::SmaCentralStep, sma_central_step},
      {OpKind::SmaRowEma, sma_row_ema},
      {OpKind::SmaRowSum, sma_row_sum},
      {OpKind::SmaStep, sma_step},
  };
  return t;
}

// Pairs a backend may claim that have no case, each with its reason. Anything else claimed
// without a case fails the harness.
struct Exclusion {
  OpKind op;
  std::vector<DType> dtypes;
  const char* why;
};
inline const std::vector<Exclusion>& exclusions() {
  using enum DType;
  static const std::vector<Exclusion> e = {
      {OpKind::ConstantOfShape,
       {F32, F16, BF16, F64, I32, I8, U8, Bool},
       "its one input is the i64 shape (ONNX: int64 only; infer() needs known integer contents); "
       "the CPU table claims every input dtype (kAll) because the kernel never reads the input"},
      {OpKind::Pow,
       {I8, U8},
       "ONNX Pow takes int32/int64/float bases only: infer() refuses int8/uint8, so no graph "
       "reaches these kernels; the CPU table claims them through kNumeric"},
  };
  return e;
}

}  // namespace cb::test::bops
