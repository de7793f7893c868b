// The CPU kernel table: which op has a kernel for which dtypes. An op missing here is reported
// by the executor's plan-time check (every gap at once), never discovered mid-run.
#include <array>

#include "kernels/cpu/cpu_kernels.h"

namespace cb::cpu {

namespace {
constexpr CpuKernel kKernels[] = {
    // ---- elementwise, data movement, reductions, softmax, dropout, layernorm ----
    {OpKind::Abs, &Abs, kNumeric},
    {OpKind::Add, &Add, kNumeric},
    {OpKind::And, &And, type_bit(DType::Bool)},
    {OpKind::Cast, &Cast, kAll},
    {OpKind::Ceil, &Ceil, kFloat},
    {OpKind::Clip, &Clip, kNumeric},
    {OpKind::Concat, &Concat, kAll},
    {OpKind::Constant, &Constant, kAll},
    {OpKind::ConstantOfShape, &ConstantOfShape, kAll},
    {OpKind::Div, &Div, kNumeric},
    {OpKind::Dropout, &Dropout, kFloat},
    {OpKind::Equal, &Equal, kNumeric | type_bit(DType::Bool)},
    {OpKind::Erf, &Erf, kFloat},
    {OpKind::Exp, &Exp, kFloat},
    {OpKind::Expand, &Expand, kAll},
    {OpKind::Flatten, &Flatten, kAll},
    {OpKind::Floor, &Floor, kFloat},
    {OpKind::Gather, &Gather, kAll},
    {OpKind::Gelu, &Gelu, kFloat},
    {OpKind::Greater, &Greater, kNumeric},
    {OpKind::GreaterOrEqual, &GreaterOrEqual, kNumeric},
    {OpKind::HardSigmoid, &HardSigmoid, kFloat},
    {OpKind::HardSwish, &HardSwish, kFloat},
    {OpKind::Identity, &Identity, kAll},
    {OpKind::LayerNormalization, &LayerNormalization, kFloat},
    {OpKind::MaskedSoftmax, &MaskedSoftmax, kFloat},
    {OpKind::LeakyRelu, &LeakyRelu, kFloat},
    {OpKind::Less, &Less, kNumeric},
    {OpKind::LessOrEqual, &LessOrEqual, kNumeric},
    {OpKind::Log, &Log, kFloat},
    {OpKind::LogSoftmax, &LogSoftmax, kFloat},
    {OpKind::Max, &Max, kNumeric},
    {OpKind::Mean, &Mean, kFloat},
    {OpKind::Min, &Min, kNumeric},
    {OpKind::Mul, &Mul, kNumeric},
    {OpKind::Neg, &Neg, kNumeric},
    {OpKind::Not, &Not, type_bit(DType::Bool)},
    {OpKind::Or, &Or, type_bit(DType::Bool)},
    {OpKind::Pad, &Pad, kAll},
    {OpKind::Pow, &Pow, kNumeric},
    {OpKind::Range, &Range, kNumeric},
    {OpKind::Reciprocal, &Reciprocal, kFloat},
    {OpKind::ReduceL1, &ReduceL1, kNumeric},
    {OpKind::ReduceL2, &ReduceL2, kFloat},
    {OpKind::ReduceLogSum, &ReduceLogSum, kFloat},
    {OpKind::ReduceLogSumExp, &ReduceLogSumExp, kFloat},
    {OpKind::ReduceMax, &ReduceMax, kNumeric},
    {OpKind::ReduceMean, &ReduceMean, kNumeric},
    {OpKind::ReduceMin, &ReduceMin, kNumeric},
    {OpKind::ReduceProd, &ReduceProd, kNumeric},
    {OpKind::ReduceSum, &ReduceSum, kNumeric},
    {OpKind::ReduceSumSquare, &ReduceSumSquare, kNumeric},
    {OpKind::Relu, &Relu, kNumeric},
    {OpKind::Reshape, &Reshape, kAll},
    {OpKind::Resize, &Resize, kFloat},
    {OpKind::Shape, &Shape, kAll},
    {OpKind::Sigmoid, &Sigmoid, kFloat},
    {OpKind::Slice, &Slice, kAll},
    {OpKind::Softmax, &Softmax, kFloat},
    {OpKind::Split, &Split, kAll},
    {OpKind::Sqrt, &Sqrt, kFloat},
    {OpKind::Squeeze, &Squeeze, kAll},
    {OpKind::Sub, &Sub, kNumeric},
    {OpKind::Sum, &Sum, kNumeric},
    {OpKind::Tanh, &Tanh, kFloat},
    {OpKind::Tile, &Tile, kAll},
    {OpKind::Transpose, &Transpose, kAll},
    {OpKind::LayoutReorder, &LayoutReorder, kFloat},
    {OpKind::Unsqueeze, &Unsqueeze, kAll},
    {OpKind::Upsample, &Resize, kFloat},
    {OpKind::Where, &Where, type_bit(DType::Bool)},
    {OpKind::Xor, &Xor, type_bit(DType::Bool)},
    // ---- backward: elementwise, softmax, loss, data movement ----
    {OpKind::ClipGrad, &ClipGrad, kFloat},
    {OpKind::DropoutGrad, &DropoutGrad, kFloat},
    {OpKind::GatherGrad, &GatherGrad, kFloat},
    {OpKind::GeluGrad, &GeluGrad, kFloat},
    {OpKind::HardSigmoidGrad, &HardSigmoidGrad, kFloat},
    {OpKind::HardSwishGrad, &HardSwishGrad, kFloat},
    {OpKind::LeakyReluGrad, &LeakyReluGrad, kFloat},
    {OpKind::MaskedSoftmaxGrad, &MaskedSoftmaxGrad, kFloat},
    {OpKind::AttentionHeads, &AttentionHeads, kF32},
    {OpKind::LogSoftmaxGrad, &LogSoftmaxGrad, kFloat},
    {OpKind::PadGrad, &PadGrad, kFloat},
    {OpKind::ReduceSumTo, &ReduceSumTo, kNumeric},
    {OpKind::ReluGrad, &ReluGrad, kFloat},
    {OpKind::ResizeGrad, &ResizeGrad, kFloat},
    {OpKind::SliceGrad, &SliceGrad, kFloat},
    {OpKind::SoftmaxCrossEntropyLoss, &SoftmaxCrossEntropyLoss, kFloat},
    {OpKind::SoftmaxCrossEntropyLossGrad, &SoftmaxCrossEntropyLossGrad, kFloat},
    {OpKind::SoftmaxGrad, &SoftmaxGrad, kFloat},
    // ---- conv, gemm, matmul, pooling, batchnorm ----
    {OpKind::AveragePool, &AveragePool, kFloat},
    {OpKind::BatchNormalization, &BatchNormalization, kFloat},
    {OpKind::Conv, &Conv, kFloat},
    {OpKind::ConvTranspose, &ConvTranspose, kFloat},
    {OpKind::Gemm, &Gemm, kFloat},
    {OpKind::GlobalAveragePool, &GlobalAveragePool, kFloat},
    {OpKind::MatMul, &MatMul, kFloat},
    {OpKind::MaxPool, &MaxPool, kFloat | type_bit(DType::I8) | type_bit(DType::U8)},
    // ---- backward: conv, pooling, normalization ----
    {OpKind::AveragePoolGrad, &AveragePoolGrad, kFloat},
    {OpKind::BatchNormalizationGrad, &BatchNormalizationGrad, kFloat},
    {OpKind::ConvGrad, &ConvGrad, kFloat},
    {OpKind::LayerNormalizationGrad, &LayerNormalizationGrad, kFloat},
    {OpKind::MaxPoolGrad, &MaxPoolGrad, kFloat},
    // ---- optimizer ----
    {OpKind::AdamWStep, &AdamWStep, kFloat},
    {OpKind::SgdStep, &SgdStep, kFloat},
    {OpKind::SmaCentralStep, &SmaCentralStep, kF32},
    {OpKind::SmaRowEma, &SmaRowEma, kF32},
    {OpKind::SmaRowSum, &SmaRowSum, kF32},
    {OpKind::SmaStep, &SmaStep, kF32},
};

struct Index {
  std::array<const CpuKernel*, static_cast<size_t>(OpKind::Count)> by_op{};
  Index() {
    for (const CpuKernel& k : kKernels) by_op[static_cast<size_t>(k.op)] = &k;
  }
};
}  // namespace

KernelFn find_cpu_kernel(OpKind op, DType dtype) {
  static const Index index;
  const CpuKernel* k = index.by_op[static_cast<size_t>(op)];
  return k && (k->dtypes & type_bit(dtype)) ? k->fn : nullptr;
}

}  // namespace cb::cpu
