// AttentionHeads (fuse_attention_heads' node) with the chains it makes of a GPT's attention, heads
// read in place from [N, T, H, d] as the CPU's permuted MatMuls read them: the forward
// Q K^T -> MaskedSoftmax -> P V (P an output, as training keeps it), and the backward
// dO V^T -> MaskedSoftmaxGrad -> dS K, dS^T Q with P^T dO beside it (dP and dS temporaries).
// The node has no infer(): params and outputs are explicit. Its reference is attention itself,
// computed per head in f64 from its definition (tests/backend_ops/references.cpp), so the steps'
// permutations are checked as well as the kernel.
#pragma once
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tests/backend_ops/case.h"

namespace cb::test::bops {

void ref_attention(const std::any& params, std::vector<Tensor>& in, std::vector<Tensor>& out);

// Inputs (forward) Q, K, V [N,T,H,d], mask?; outputs P [N,H,T,T], O [N,T,H,d]. Inputs (backward)
// dO, V, P, Q, K, mask?; outputs dV, dQ, dK [N,T,H,d].
inline std::vector<Case> attention_heads(OpKind, DType) {
  using H = ops::AttentionHeadsParams;
  using R = H::Ref;
  using F = R::From;
  using MP = ops::MaskedSoftmaxParams;
  auto mm = [](std::string name, bool ta, bool tb, DimList ap, DimList bp, DimList yp,
               std::vector<R> in, R out) {
    H::Step s{.kind = H::Kind::MatMul, .name = std::move(name), .in = std::move(in), .out = out};
    s.matmul.trans_a = ta, s.matmul.trans_b = tb;
    s.matmul.a_perm = std::move(ap), s.matmul.b_perm = std::move(bp),
    s.matmul.y_perm = std::move(yp);
    return s;
  };
  const DimList heads{0, 2, 1, 3}, heads_t{0, 2, 3, 1}, none{};
  std::vector<Case> cs;
  auto c = [&](std::string name, int64_t n, int64_t t, int64_t h, int64_t d, MP sp,
               std::optional<In> mask) {
    const std::vector<int64_t> x4{n, t, h, d}, s4{n, h, t, t};
    const int32_t m = mask ? 1 : 0;  // the mask's input, after the first
    // Forward: Q 0, K 1, (mask 2), V 2 + m.
    H f;
    f.temp_bf16 = {0};
    f.steps.push_back(
        mm("S", false, false, heads, heads_t, none, {{F::Input, 0}, {F::Input, 1}}, {F::Temp, 0}));
    H::Step sm{.kind = H::Kind::MaskedSoftmax,
               .name = "P",
               .softmax = sp,
               .in = {{F::Temp, 0}},
               .out = {F::Output, 0}};
    if (mask) sm.in.push_back({F::Input, 2});
    f.steps.push_back(sm);
    f.steps.push_back(mm("O", false, false, none, heads, heads, {{F::Output, 0}, {F::Input, 2 + m}},
                         {F::Output, 1}));
    Case fw{.name = name + ", forward",
            .in = {x(x4), x(x4)},
            .params = f,
            .outs = {x(s4), x(x4)},
            .ref = ref_attention};
    if (mask) fw.in.push_back(*mask);
    fw.in.push_back(x(x4));
    cs.push_back(fw);
    // Backward: dO 0, V 1, P 2, Q 3, K 4, (mask 5).
    H b;
    b.temp_bf16 = {0, 0};
    b.steps.push_back(
        mm("dP", false, true, heads, heads, none, {{F::Input, 0}, {F::Input, 1}}, {F::Temp, 0}));
    b.steps.push_back(
        mm("dV", true, false, none, heads, heads, {{F::Input, 2}, {F::Input, 0}}, {F::Output, 0}));
    H::Step sg{.kind = H::Kind::MaskedSoftmaxGrad,
               .name = "dS",
               .softmax = sp,
               .in = {{F::Temp, 0}, {F::Input, 2}},
               .out = {F::Temp, 1}};
    if (mask) sg.in.push_back({F::Input, 5});
    b.steps.push_back(sg);
    b.steps.push_back(
        mm("dQ", false, true, none, heads_t, heads, {{F::Temp, 1}, {F::Input, 4}}, {F::Output, 1}));
    b.steps.push_back(mm("dK", true, false, heads, none, {0, 3, 1, 2},
                         {{F::Input, 3}, {F::Temp, 1}}, {F::Output, 2}));
    Case bw{.name = name + ", backward",
            .in = {x(x4), x(x4), x(s4, uniform(0, 1)), x(x4), x(x4)},
            .params = b,
            .outs = {x(x4), x(x4), x(x4)},
            .ref = ref_attention};
    if (mask) bw.in.push_back(*mask);
    cs.push_back(bw);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> causal;  // true above the diagonal
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 9; ++j) causal.push_back(j > i);
  c("causal", 2, 9, 3, 4, MP{0.5f, MP::Mask::FillWhereTrue, static_cast<float>(-inf)},
    fixed(DType::Bool, {9, 9}, list(causal)));
  c("additive padding mask", 3, 6, 2, 5, MP{0.25f, MP::Mask::Add, 0},
    x({3, 1, 1, 6}, uniform(-3, 0)));
  c("scale only, one head", 2, 7, 1, 3, MP{0.125f, MP::Mask::None, 0}, std::nullopt);
  return cs;
}

}  // namespace cb::test::bops
