// AttentionHeads(inputs...) -> outputs...: a chain of MatMul, MaskedSoftmax and MaskedSoftmaxGrad
// nodes (AttentionHeadsParams) over the same batch of [T, T] blocks, made by fuse_attention_heads
// (runtime/passes.h) on the CPU's training and evaluation graphs, past inference, autodiff and
// the precision passes. The kernel runs the chain one batch index (one head of one example) at a
// time, so attention's scores S, and in the backward pass dP and dS, live one [T, T] block at a
// time in the thread's cache instead of as [N, H, T, T] tensors in memory; each step is its
// node's arithmetic on the same data, so every output has the unfused graph's bits. Never read
// from a file and never inferred: its outputs keep the shapes the replaced nodes gave them.
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"

namespace cb::ops {

const OpDef kAttentionHeads{.kind = OpKind::AttentionHeads,
                            .name = "AttentionHeads",
                            .inputs_min = 1,
                            .inputs_max = -1,
                            .outputs_min = 1,
                            .outputs_max = -1,
                            .internal = true};

}  // namespace cb::ops
