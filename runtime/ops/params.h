// The typed attribute structs of the ops in runtime/ops/: each op's parse() fills one, infer()
// completes what depends on input shapes (resolved pads, normalised axes), and kernels read it.
// Kept in one header so kernels can see them without seeing the rest of the catalog.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/small_vec.h"
#include "runtime/tensor.h"

namespace cb::ops {

// Conv and pooling attributes, shared by the ops with a sliding window.
enum class AutoPad : uint8_t { NotSet, SameUpper, SameLower, Valid };
struct WindowAttrs {
  AutoPad auto_pad = AutoPad::NotSet;
  DimList kernel_shape, strides, dilations;
  PadList pads;  // begins then ends
  bool ceil_mode = false;
};

// batch_normalization.cpp
struct BatchNormalizationParams {
  float epsilon = 1e-5f;
  float momentum = 0.9f;  // ONNX convention: running = running * momentum + batch * (1 - momentum)
  bool training = false;
  // The running variance's update in training: the ONNX spec's biased batch variance (false), or
  // the unbiased one PyTorch and TensorFlow use (true; set with training by set_training(), which
  // the trainer calls, so that training matches the frameworks the models come from).
  bool unbiased_running_var = false;
  // Y = max(Y, 0): a Relu fused in (fuse_batch_norm_relu, runtime/passes.h); its gradient then
  // reads that Y as a fourth input and masks dY where Y <= 0, as ReluGrad does.
  bool relu = false;
  // With relu: the fused activation is a Clip(clip_min, clip_max) instead (MobileNet's ReLU6,
  // Clip(0, 6)): Y is Clip's clamp of y, and the gradient counts dY where
  // clip_min < Y < clip_max, the rule of PyTorch's ReLU6 (hardtanh); ClipGrad (torch.clamp's
  // rule) counts the bounds too, which differs only where y is exactly a bound.
  bool clip = false;
  float clip_min = 0, clip_max = 0;
  // A residual block's Add fused in (fuse_batch_norm_relu): a sixth input R, X's shape and
  // layout, added to y before the activation: Y = act(y + R), rounded once to Y's storage: the
  // bits of BatchNormalization, Add and the activation apart, but for bf16 activations, which
  // those round twice (y, then the sum): there the fused sum is never farther from the exact one.
  // The gradient does not change (Add passes dY through).
  bool residual = false;
};

// cast.cpp
struct CastParams {
  DType to;
};

// clip.cpp
struct ClipParams {
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
};

// concat.cpp
struct ConcatParams {
  int64_t axis;
};

// constant.cpp
struct ConstantParams {
  TensorPtr value;
};

// conv.cpp, conv_transpose.cpp
struct ConvParams {
  WindowAttrs window;  // pads resolved by infer() are stored back here for kernels
  int64_t group = 1;
  // Mixed precision (set_compute_precision in runtime/passes.h): an f32 Conv / ConvGrad whose
  // kernel may round its operands (X, W, dY) to bf16 and multiply in bf16, accumulating and
  // writing f32. Where a kernel has no bf16 path it computes in f32, which is never less exact.
  bool bf16 = false;
  // CPU with oneDNN (choose_conv_algorithms in runtime/passes.h): a 3x3 stride-1 f32 convolution
  // that oneDNN's Winograd kernels (F(4x4, 3x3)) compute with fewer multiplications than its
  // direct ones, forward and backward. Where oneDNN has no such kernel (cores without AVX-512)
  // the kernel convolves directly; other devices ignore it.
  bool winograd = false;
  // ConvTranspose only: its attributes as given. ConvTranspose is the data gradient of the Conv
  // from its output Y back to its input X; its infer() derives `window` (auto_pad NOTSET, the
  // pads of that Conv: begin pads as resolved, end pads minus output_padding, either may be
  // negative) from these, so that kernels and the vjp see an ordinary Conv geometry.
  struct Transpose {
    AutoPad auto_pad = AutoPad::NotSet;
    PadList pads;
    DimList output_padding, output_shape;
  } transpose;
};

// layout_reorder.cpp
struct LayoutParams {
  bool to_blocked = true;  // plain -> nChw16c; false: nChw16c -> plain
};

// dropout.cpp
struct DropoutParams {
  float ratio = 0.5f;
  bool training = false;
  std::optional<int64_t> seed;
};

// elementwise_unary.cpp
struct LeakyReluParams {
  float alpha;
};

// hard_sigmoid.cpp: y = max(0, min(1, alpha * x + beta)) (HardSwish: x * that, alpha 1/6)
struct HardSigmoidParams {
  float alpha = 0.2f, beta = 0.5f;
};

// gelu.cpp: y = x Phi(x) (approximate "none", erf) or PyTorch's tanh form (approximate "tanh")
struct GeluParams {
  bool tanh = false;
};

// gather.cpp
struct GatherParams {
  int64_t axis = 0;
};

// gemm.cpp
struct GemmParams {
  float alpha = 1, beta = 1;
  bool trans_a = false, trans_b = false;
  bool bf16 = false;  // mixed precision: as ConvParams::bf16 (A and B rounded, f32 accumulation)
};
// mat_mul.cpp: MatMul has no ONNX attributes (an absent params: all false). bf16: mixed
// precision, as GemmParams::bf16. trans_a / trans_b (internal, fold_matmul_transposes): the
// operand is stored with its last two dims swapped ([..., K, M] for A, [..., N, K] for B), both
// operands of rank >= 2. a_perm / b_perm / y_perm (internal, fold_matmul_transposes with
// permuted operands; the CPU only): A is Transpose(input 0, a_perm), then its last two dims
// swapped where trans_a, B likewise, and output 0 holds Transpose(A B, y_perm): a multi-head
// attention's [N,T,H,d] read as [N,H,T,d] without a copy. Empty: as stored.
struct MatMulParams {
  bool bf16 = false;
  bool trans_a = false, trans_b = false;
  DimList a_perm, b_perm, y_perm;
  bool permuted() const { return !a_perm.empty() || !b_perm.empty() || !y_perm.empty(); }
};
// A bf16-marked product (Gemm, MatMul) of fewer multiply-adds than this runs in f32 on the CPU:
// the operands' rounding and oneDNN's call would cost more than bf16 saves.
constexpr int64_t kBf16MinMacs = int64_t{1} << 18;

// layer_normalization.cpp
struct LayerNormalizationParams {
  int64_t axis = -1;
  float epsilon = 1e-5f;
};

// pad.cpp
struct PadParams {
  enum class Mode : uint8_t { Constant, Reflect, Edge } mode = Mode::Constant;
  std::optional<PadList> pads;  // attribute form
  float value = 0;
};

// pool.cpp
struct PoolParams {
  WindowAttrs window;
  bool count_include_pad = false;  // AveragePool
  int64_t storage_order = 0;       // MaxPool Indices layout
};

// resize.cpp: Resize(X, roi, scales, sizes) (opset 10: X, scales), nearest, linear and cubic
struct ResizeParams {
  enum class Mode : uint8_t { Nearest, Linear, Cubic } mode = Mode::Nearest;
  float cubic_a = -0.75f;        // cubic_coeff_a
  bool exclude_outside = false;  // cubic: taps outside the input get weight 0, the rest renormed
  enum class Coord : uint8_t {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNN
  } coord = Coord::HalfPixel;
  // Simple: opset 10 (no nearest_mode; ONNX Runtime's choice): floor upsampling, ceil downsampling
  enum class Nearest : uint8_t {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    Simple
  } nearest = Nearest::RoundPreferFloor;
  std::optional<DimList> axes;  // opset 18's axes attribute
  // Completed by infer(): per input dim, the scale of the coordinate transform (the given scale,
  // or output / input size where sizes were given).
  SmallVec<double, kMaxRank> scales;
};

// reduce.cpp (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1,
// ReduceL2, ReduceLogSum, ReduceLogSumExp)
struct ReduceParams {
  std::optional<DimList> axes;  // from the attribute form
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  int64_t axes_input_since;  // first opset with axes as an input
  // Completed by infer(): per input dim, is it reduced (all false: noop).
  SmallVec<bool, kMaxRank> reduced;
};

// reshape.cpp
struct ReshapeParams {
  bool allowzero = false;
};

// shape.cpp
struct ShapeParams {
  int64_t start = 0;
  std::optional<int64_t> end;
};

// slice.cpp
struct SliceParams {
  std::optional<DimList> starts, ends, axes;  // attribute form (opset < 10)
  // Completed by infer(): per input dim, the first index taken and the step (0, 1 if untouched).
  DimList dim_start, dim_step;
};

// softmax.cpp
struct SoftmaxParams {
  int64_t axis;
  bool coerce_2d;  // opset < 13 semantics: softmax over the flattened dims [axis, rank)
};

// masked_softmax.cpp: softmax over the last axis of scale * X, masked by input 1 when present:
// Where(mask, fill, .) (kind FillWhereTrue), Where(mask, ., fill) (FillWhereFalse) with a bool
// mask, or + mask (Add) with a float one; the mask broadcasts to X.
struct MaskedSoftmaxParams {
  enum class Mask { None, FillWhereTrue, FillWhereFalse, Add };
  float scale = 1;
  Mask mask = Mask::None;
  float fill = 0;
};

// attention_heads.cpp: a chain of MatMul, MaskedSoftmax and MaskedSoftmaxGrad nodes over the same
// batch of [T, T] blocks (attention's heads), run one batch index at a time (fuse_attention_heads).
// Each step reads node inputs, outputs earlier steps wrote, or temporaries: values only the
// chain reads, held one block at a time.
struct AttentionHeadsParams {
  enum class Kind : uint8_t { MatMul, MaskedSoftmax, MaskedSoftmaxGrad };
  struct Ref {
    enum class From : uint8_t { Input, Output, Temp } from = From::Input;
    int32_t index = 0;  // into the node's inputs, its outputs, or the temporaries
    bool operator==(const Ref&) const = default;
  };
  struct Step {
    Kind kind = Kind::MatMul;
    std::string name;             // the node it replaced
    MatMulParams matmul;          // Kind::MatMul
    MaskedSoftmaxParams softmax;  // the softmax kinds
    std::vector<Ref> in;          // the replaced node's inputs (an absent mask: no entry)
    Ref out;
  };
  std::vector<Step> steps;
  std::vector<char> temp_bf16;  // per temporary: stored rounded to bf16 (Value::bf16_storage)
};

// split.cpp
struct SplitParams {
  int64_t axis = 0;
  std::optional<SplitList> split;      // attribute form
  std::optional<int64_t> num_outputs;  // opset 18
};

// squeeze.cpp
struct SqueezeParams {
  std::optional<DimList> axes;  // attribute form
};

// transpose.cpp
struct TransposeParams {
  DimList perm;  // empty: reverse; completed by infer()
};

// softmax_cross_entropy_loss.cpp: scores [N,C], labels [N] -> loss (mean/sum: scalar, none: [N])
struct SoftmaxCrossEntropyLossParams {
  enum class Reduction : uint8_t { Mean, Sum, None } reduction = Reduction::Mean;
  std::optional<int64_t> ignore_index;  // samples with this label add nothing (PyTorch: -100)
  // Not an ONNX attribute (the trainer's losses set it): PyTorch's CrossEntropyLoss
  // label_smoothing e in [0, 1], per element loss (1 - e) * nll + e * mean over the classes of
  // -log_softmax; not with class weights.
  double label_smoothing = 0;
};

// optimizer.cpp: steps over flat buffers (PyTorch's semantics); all fields plain scalars
struct SgdParams {
  float lr = 0.01f, momentum = 0, weight_decay = 0, dampening = 0;
  bool nesterov = false;
  bool first_step = true;  // PyTorch starts the momentum buffer at the first gradient
};
struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
  int64_t step = 1;  // 1-based, for bias correction
};
enum class OptimizerKind : uint8_t { Sgd, AdamW };
// SMA over [R][P] flat buffers (R learners of one device; see runtime/ops/optimizer.cpp)
struct SmaStepParams {
  OptimizerKind optimizer = OptimizerKind::Sgd;
  float lr = 0.01f, weight_decay = 0;
  float momentum = 0;  // SGD
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
  float alpha = 0;  // the pull toward z; 0 (or no z given): plain local steps, no correction
  // The correction from the post-step value, which the learner keeps (the reset rules: the
  // trainer then sets every learner to the new z); false: from the pre-step value, subtracted.
  bool post = false;
  // Above 0: each learner's gradient row is scaled by min(1, clip_norm / (|g| + 1e-6)) before its
  // step (torch.nn.utils.clip_grad_norm_ over all of that learner's parameters); SmaStep then
  // needs its norms output. 0: the gradients as they are.
  float clip_norm = 0;
  // With the ema output (the weight average of the learners' mean, alpha 0): after every row's
  // step, ema = ema_decay * ema + (1 - ema_decay) * (sum over rows of ema_scale * param), in the
  // same pass (SmaRowEma's arithmetic).
  float ema_decay = 0, ema_scale = 1;
};
struct SmaCentralStepParams {
  float momentum = 0.9f;  // mu_z
  float ema_decay = 0;    // with the ema output: ema = decay * ema + (1 - decay) * z_new
  float scale = 1;        // z_new = z + scale * sum + mu_z (z - z_prev)
};
struct SmaRowEmaParams {
  float decay = 0.999f;  // ema = decay * ema + (1 - decay) * (sum over rows of scale * row)
  float scale = 1;
};
struct SmaRowSumParams {
  float scale = 1;  // out = sum over rows of (scale * row)
};

// Every params struct a kernel reads is trivially copyable (no strings, no heap): a backend can
// hand it to a device kernel by value. ConstantParams is the exception: Constant's value is host
// data, folded into a constant buffer at plan time.
#define CB_PARAMS_POD(T) \
  static_assert(std::is_trivially_copyable_v<T>, #T " must be trivially copyable");
CB_PARAMS_POD(BatchNormalizationParams)
CB_PARAMS_POD(CastParams)
CB_PARAMS_POD(ClipParams)
CB_PARAMS_POD(ConcatParams)
CB_PARAMS_POD(ConvParams)
CB_PARAMS_POD(DropoutParams)
CB_PARAMS_POD(LeakyReluParams)
CB_PARAMS_POD(HardSigmoidParams)
CB_PARAMS_POD(GatherParams)
CB_PARAMS_POD(GemmParams)
CB_PARAMS_POD(MatMulParams)
CB_PARAMS_POD(LayerNormalizationParams)
CB_PARAMS_POD(PadParams)
CB_PARAMS_POD(PoolParams)
CB_PARAMS_POD(ReduceParams)
CB_PARAMS_POD(ResizeParams)
CB_PARAMS_POD(ReshapeParams)
CB_PARAMS_POD(ShapeParams)
CB_PARAMS_POD(SliceParams)
CB_PARAMS_POD(SoftmaxParams)
CB_PARAMS_POD(SplitParams)
CB_PARAMS_POD(SqueezeParams)
CB_PARAMS_POD(TransposeParams)
CB_PARAMS_POD(SoftmaxCrossEntropyLossParams)
CB_PARAMS_POD(SgdParams)
CB_PARAMS_POD(AdamWParams)
CB_PARAMS_POD(SmaStepParams)
CB_PARAMS_POD(SmaCentralStepParams)
CB_PARAMS_POD(SmaRowSumParams)
CB_PARAMS_POD(SmaRowEmaParams)
#undef CB_PARAMS_POD

}  // namespace cb::ops
