// MatMul with numpy semantics: [...,M,K] x [...,K,N] -> [broadcast(...),M,N]; a 1-D operand is
// promoted by a unit dim that is removed from the result.
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
// Whether perm holds each of 0..rank-1 once.
bool is_permutation(const DimList& perm, size_t rank) {
  if (perm.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int64_t d : perm) {
    if (d < 0 || d >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

void infer(InferCtx& c) {
  c.expect_same_dtype(0, 1);
  Shape a = c.shape(0), b = c.shape(1);
  // Operands stored permuted or transposed (MatMulParams, set by fold_matmul_transposes): their
  // logical shape.
  const auto* mp = std::any_cast<MatMulParams>(&c.node().params);
  auto permute = [&](const Shape& s, const DimList& perm, const char* what) {
    if (perm.empty()) return s;
    if (!is_permutation(perm, s.size()))
      c.fail("{} of rank {} read through an invalid permutation", what, s.size());
    Shape p;
    for (int64_t d : perm) p.push_back(s[static_cast<size_t>(d)]);
    return p;
  };
  if (mp && (mp->trans_a || mp->trans_b || mp->permuted())) {
    if (a.size() < 2 || b.size() < 2)
      c.fail("transposed operands need rank >= 2, got {} and {}", to_string(a), to_string(b));
    a = permute(a, mp->a_perm, "A");
    b = permute(b, mp->b_perm, "B");
    if (mp->trans_a) std::swap(a[a.size() - 1], a[a.size() - 2]);
    if (mp->trans_b) std::swap(b[b.size() - 1], b[b.size() - 2]);
  }
  if (a.empty() || b.empty())
    c.fail("operands must have rank >= 1, got {} and {}", to_string(a), to_string(b));
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), Dim::of(1));
  if (b1) b.push_back(Dim::of(1));
  if (a.back() != b[b.size() - 2])
    c.fail("inner dims differ: A {} vs B {}", to_string(c.shape(0)), to_string(c.shape(1)));
  auto batch = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!batch)
    c.fail("batch dims of A {} and B {} do not broadcast", to_string(c.shape(0)),
           to_string(c.shape(1)));
  Shape out = *batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  if (mp && !mp->y_perm.empty()) out = permute(out, mp->y_perm, "the result");
  c.set(0, c.dtype(0), out);
}
// dA = dY B^T, dB = A^T dY (transposing the last two dims), summed over broadcast batch dims.
ValueId swap_last(VjpCtx& c, ValueId v) {
  auto r = static_cast<int64_t>(c.val(v).shape.size());
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  return c.b.op("Transpose", {v}, {{"perm", perm}});
}
void vjp(VjpCtx& c) {
  if (c.x_shape(0).size() < 2 || c.x_shape(1).size() < 2)
    c.fail("MatMul with a 1-D operand has no gradient yet; reshape it to 2-D before export");
  if (c.need(0))
    c.set_dx(0, c.b.sum_to(c.b.op("MatMul", {c.dy(0), swap_last(c, c.x(1))}), c.x_shape(0)));
  if (!c.need(1)) return;
  const Shape& a = c.x_shape(0);
  const Shape& w = c.x_shape(1);
  if (a.size() > 2 && w.size() == 2 && shape_is_static(w)) {
    // A matrix B (a weight) shared by every batch index of A: dB = sum over the batch of
    // A_b^T dY_b = A'^T dY' with the batch folded into the rows (A' [rows, K], dY' [rows, N]:
    // free reshapes), one product over all the rows instead of one per batch index summed after.
    const ValueId a2 = c.b.op("Reshape", {c.x(0), c.b.ints({-1, w[0].value})});
    const ValueId dy2 = c.b.op("Reshape", {c.dy(0), c.b.ints({-1, w[1].value})});
    c.set_dx(1, c.b.op("MatMul", {swap_last(c, a2), dy2}));
    return;
  }
  c.set_dx(1, c.b.sum_to(c.b.op("MatMul", {swap_last(c, c.x(0)), c.dy(0)}), w));
}
}  // namespace

const OpDef kMatMul{.kind = OpKind::MatMul,
                    .name = "MatMul",
                    .inputs_min = 2,
                    .inputs_max = 2,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .infer = infer,
                    .weight_inputs = bit(0) | bit(1),
                    .vjp = vjp};

}  // namespace cb::ops
