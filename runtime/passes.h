// Graph passes that run after import, each a function over the IR.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace cb {

struct FoldStats {
  int64_t folded = 0;  // nodes whose outputs were all known (constants, shape arithmetic)
  int64_t dead = 0;    // nodes none of whose outputs reach a graph output
};

// Replaces every node of an op with a decomposition (OpDef::lower: LSTM, GRU, RNN, If, Einsum)
// by the nodes it emits, in the node's place, its output values kept (now produced by the
// decomposition). Runs on an inferred graph; returns the number of nodes replaced.
int64_t lower_composites(Graph& g);

// Replaces nodes whose outputs are all known before execution by constant values (data where
// the contents are static, `known` dims where they depend on N), removes nodes that do not
// reach a graph output, and drops values nothing refers to anymore. Keeps topological order.
FoldStats fold_and_prune(Graph& g);

// Replaces GELU spelled out as elementwise nodes (what exporters before opset 20 write: PyTorch's
// nn.GELU as Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5; tf2onnx's 0.5 x first, or
// Mul(x, 1/sqrt 2)) by one Gelu node (runtime/ops/gelu.cpp) named after the pattern's scope
// ("/blocks.0/mlp/mlp.1/Gelu"), where every intermediate value has that one reader and is no graph
// output. The dropped nodes stay in the graph without a reader: fold_and_prune removes them.
// Runs on an inferred graph whose constants are folded; returns the number of Gelu nodes made.
int64_t fuse_gelu(Graph& g);

// Replaces attention's scale, mask and Softmax (over the last axis) by one MaskedSoftmax node
// (runtime/ops/masked_softmax.cpp): Softmax(Where(mask, fill, Mul(S, c))) and the other
// operand order (PyTorch's masked_fill of a causal mask), Softmax(Add(Mul(S, c), mask)) (BERT's
// additive padding mask), each with or without the Mul by a constant c. Only where each
// intermediate has that one reader, the fill and c are constant scalars, and the mask is bool or
// a float no parameter reaches (it gets no gradient). The Softmax node keeps its name and output;
// the dropped nodes lose their reader (fold_and_prune removes them). Returns the nodes fused.
int64_t fuse_attention_softmax(Graph& g);

// BatchNormalization whose output only a Relu reads computes the Relu too (its `relu` flag), and
// in a training graph the ReluGrad feeding that BatchNorm's gradient folds into the gradient:
// each pair becomes one pass over the activation, with the same values. Likewise a Clip with
// finite constant bounds (MobileNet's ReLU6) and its ClipGrads (`clip`): the same forward values;
// the gradient counts dY strictly inside the bounds (PyTorch's ReLU6 rule) where ClipGrad counts
// the bounds too, so the two differ only where BatchNorm's output is exactly a bound. And a
// residual block's Add(BatchNorm's Y, R), with the Relu that alone reads the sum, becomes that
// BatchNorm with R as a sixth input (`residual`, runtime/ops/params.h), moved to the Add's place:
// one pass for three, the same values (bf16 activations: the sum rounded once, not twice: never
// farther from the exact sum). Returns the groups fused.
// Runs on graphs past autodiff (the trainer's), so the imported graph and its export are untouched.
int64_t fuse_batch_norm_relu(Graph& g);

// Each training-mode f32 BatchNormalization whose BatchNormalizationGrad (same X and scale) is in
// the graph writes its batch statistics as output 5 (f64 [4, C]: mean, 1/sqrt(var + eps), and
// the affine mul, add it applied), and that gradient reads them as its fifth input (input 4;
// input 3, the fused activation's output, absent where none is fused): the gradient skips the pass
// over X that recomputed the mean, and masks a fused activation from X * mul + add (the forward's
// bits; with bf16 storage against bounds that give its stored output's mask) instead of reading
// its output. Run last on the trainer's graph (after fuse_batch_norm_relu and the layout passes).
// Returns the gradients given statistics.
int64_t save_batch_norm_statistics(Graph& g);

// Initializers become Parameter (float, used in a differentiable slot), State (BatchNorm running
// statistics) or Constant (everything else), from the op catalog's input traits.
void classify_initializers(Graph& g);

// --freeze: parameters whose name matches any of the shell patterns (fnmatch: * ? [..]) become
// constants. Returns how many tensors were frozen; a pattern that matches no parameter is an
// error naming it and a few parameter names.
int64_t freeze_parameters(Graph& g, const std::vector<std::string>& patterns);

// Training mode (BatchNorm on batch statistics, Dropout active) or evaluation mode (running
// statistics, Dropout the identity), whatever mode the model was exported in.
void set_training(Graph& g, bool training);

// Arithmetic precision of training (cb-train --precision). F32: everything f32. BF16 (mixed
// precision): tensors, parameters, optimizer and SMA state stay f32; the f32 convolutions and
// matrix products, forward and backward (Conv, ConvGrad, Gemm, MatMul), round their operands to
// bf16 and multiply in bf16 with f32 accumulation and f32 results, where the device has bf16
// kernels (DeviceCaps::bf16). BatchNorm statistics, softmax, losses and every other op stay f32.
enum class Precision { F32, BF16 };
Precision parse_precision(const std::string& s);  // f32 | bf16; cb::Error naming the choices
const char* precision_name(Precision p);
// Marks the graph's f32 Conv, ConvGrad, Gemm and MatMul nodes for `p` (ConvParams::bf16,
// GemmParams::bf16, MatMulParams); returns how many nodes compute in bf16.
int64_t set_compute_precision(Graph& g, Precision p);

// How the CPU's convolutions multiply (cb-train --conv-algorithm). Auto: Winograd where
// choose_conv_algorithms marks a convolution; Direct: every convolution directly (oneDNN's
// direct kernels; results then do not depend on the algorithm choice).
enum class ConvAlgorithm { Auto, Direct };
ConvAlgorithm parse_conv_algorithm(const std::string& s);  // auto | direct; cb::Error otherwise
const char* conv_algorithm_name(ConvAlgorithm a);
// For the CPU with oneDNN: marks the f32 Conv and ConvGrad nodes (not bf16 ones) that oneDNN's
// Winograd F(4x4, 3x3) kernels run faster than its direct ones (ConvParams::winograd): 2-D, 3x3,
// stride 1, dilation 1, pads of at most 1, one group, input and output channels multiples of 16
// and at least 32, outputs of at least 14x14 (measured on AVX-512 cores at 8 samples a thread:
// 1.6x the direct kernels' speed at 14x14, 2.1-2.4x at 28x28 and 56x56, slower at 7x7; with 16
// channels, ResNet-20's first stage, the backward pass is slower). The results
// differ from a direct convolution's by rounding only (about 1e-6 of the largest output).
// Run after set_compute_precision; returns the number of nodes marked.
int64_t choose_conv_algorithms(Graph& g);

// MatMul reads an operand whose last two dims a Transpose swapped from the Transpose's input
// instead (MatMulParams::trans_a / trans_b: the product reads it transposed, in place), for
// operands of rank >= 2; Transposes nothing reads any more are removed. The backward graph's
// dA = dY B^T and dB = A^T dY, and attention's Q K^T, then multiply without a copy. A product
// whose only reader swaps its last two dims computes (A B)^T = B^T A^T into the Transpose's output
// instead (the gradient of a weight the forward read transposed). With `permuted` (devices whose
// MatMul reads and writes through any permutation: the CPU), also an operand behind any other
// Transpose whose result's last two dims the product can read in place, and a result only such
// a Transpose reads (MatMulParams::a_perm / b_perm / y_perm): attention's heads [N,T,H,d] read
// as [N,H,T,d], and joined again, without a copy. Runs on an inferred graph; returns the number
// of Transposes folded (operands and products).
int64_t fold_matmul_transposes(Graph& g, bool permuted = false);

// For the CPU with oneDNN (DeviceCaps::blocked_layouts): keeps f32 activations [N, C, H, W] (C a
// multiple of 16) in oneDNN's blocked nChw16c layout (Value::blocked) along chains of the ops
// whose kernels read and write it -- Conv and ConvGrad (X, Y, dY, dX: no reorder in or out),
// BatchNormalization and its gradient, Relu, Clip (ReLU6), MaxPool (without Indices),
// AveragePool, their gradients and same-shape Add --
// so that a conv's
// output reaches the next conv without two reorders. Values an op reads or writes together
// element for element share a layout; such a group goes blocked when every member can and it
// touches a conv. A blocked value gets a LayoutReorder node where a plain-only op writes it or
// reads it (one per value). Graph inputs and outputs stay plain. With bf16_storage (mixed
// precision) the blocked values are stored rounded to bf16 (Value::bf16_storage), half the bytes
// for every op along the chain; LayoutReorder converts at its ends.
struct LayoutStats {
  int64_t blocked = 0;   // values kept in the blocked layout
  int64_t reorders = 0;  // LayoutReorder nodes inserted
};
LayoutStats assign_blocked_layouts(Graph& g, bool bf16_storage = false);

// For --precision bf16 on the CPU with oneDNN: an f32 activation that only bf16 products read
// (MatMul marked by set_compute_precision, directly or through Reshape-like views) is stored
// rounded to bf16 (Value::bf16_storage) by the op that makes it -- Transpose, Split, Gelu,
// LayerNormalization's Y, MaskedSoftmaxGrad -- where each product would round it anyway: the
// products then read it as it is, every reader sees the bits it saw before, and the value takes
// half the bytes. Run after set_compute_precision and assign_blocked_layouts; returns the number
// of values so stored (views included).
int64_t assign_bf16_operands(Graph& g);

// For the CPU (whose MatMul reads heads through permutations): each chain of MatMul,
// MaskedSoftmax and MaskedSoftmaxGrad nodes over the same batch dims joined by [..., T, T] values
// they read and write block by block becomes one AttentionHeads node
// (runtime/ops/attention_heads.cpp) that runs the chain one batch index at a time: attention's
// forward S = Q K^T -> P -> P V, and its backward dP = dO V^T -> dS -> dS K, dS^T Q with
// dV = P^T dO beside it. A value only the chain's nodes read, within 16 nodes of its writer
// (S, dP, dS), lives a [T, T] block at a time in cache and is never a tensor; one read later or
// by other nodes (P, which the backward pass reads) stays one. The same arithmetic on the same
// data, so the same bits. The node runs where the chain's last node ran; nodes in between that
// read what the chain writes (a gradient's reshape) move after it, and a chain one of whose
// nodes reads what such a node writes stays as it is. Run last, after assign_bf16_operands;
// returns the number of chains fused.
int64_t fuse_attention_heads(Graph& g);

}  // namespace cb
