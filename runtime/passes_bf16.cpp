// assign_bf16_operands (runtime/passes.h): activations that only bf16 products read, stored as
// bf16 by the op that makes them.
#include <any>
#include <string_view>

#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"

namespace cb {
namespace {

// Extent of d at batch size 1.
int64_t at_one(const Dim& d) { return d.resolve(1); }

// A MatMul that multiplies in bf16 (set_compute_precision) reading v as operand A or B, each of
// its products large enough for the bf16 kernel at any batch size. The CPU kernel multiplies
// one [M,K] x [K,N] per batch index, or folds the batch into M, so M*N*K with the batch at 1 is
// the smallest product it calls. A smaller one runs in f32 from the f32 operands, which a
// rounded operand would change.
bool bf16_product_operand(const Graph& g, const Node& n, ValueId v) {
  if (!n.def || std::string_view(n.def->name) != "MatMul") return false;
  const auto* mp = std::any_cast<ops::MatMulParams>(&n.params);
  if (!mp || !mp->bf16 || n.inputs.size() != 2 || (n.inputs[0] != v && n.inputs[1] != v))
    return false;
  // The operands' logical shapes: through their permutations, then transposed.
  auto logical = [&](ValueId v, const DimList& perm) {
    const Shape& s = g.value(v).shape;
    if (perm.empty()) return s;
    Shape p;
    for (int64_t d : perm) p.push_back(s.at(static_cast<size_t>(d)));
    return p;
  };
  const Shape a = logical(n.inputs[0], mp->a_perm), b = logical(n.inputs[1], mp->b_perm);
  if (a.size() < 2 || b.size() < 2) return false;
  const int64_t m = at_one(a[a.size() - (mp->trans_a ? 1 : 2)]),
                k = at_one(a[a.size() - (mp->trans_a ? 2 : 1)]),
                nn = at_one(b[b.size() - (mp->trans_b ? 2 : 1)]);
  return m * nn * k >= ops::kBf16MinMacs;
}

// How many outputs (from the first) the op's CPU kernel writes rounded to bf16 where they are so
// stored: Split all, a few ops their first, the rest none.
size_t bf16_outputs(const Node& n) {
  const std::string_view op = n.def->name;
  if (op == "Split") return n.outputs.size();
  return op == "Transpose" || op == "Gelu" || op == "LayerNormalization" ||
                 op == "MaskedSoftmaxGrad"
             ? 1
             : 0;
}

}  // namespace

int64_t assign_bf16_operands(Graph& g) {
  const size_t nv = g.values.size();
  const auto users = g.consumers();
  std::vector<char> bound(nv, 0);  // read or written from outside the run
  for (ValueId v : g.outputs) bound[static_cast<size_t>(v)] = 1;
  for (ValueId v : g.inputs) bound[static_cast<size_t>(v)] = 1;
  // only_products(v): v is an f32 activation read, directly or through views (Reshape and the
  // like: the same bytes), only as a bf16 product's operand.
  std::vector<signed char> memo(nv, -1);
  auto only_products = [&](auto&& self, ValueId v) -> bool {
    signed char& m = memo[static_cast<size_t>(v)];
    if (m >= 0) return m != 0;
    const Value& val = g.value(v);
    bool ok = !bound[static_cast<size_t>(v)] && val.kind == ValueKind::Activation &&
              val.dtype == DType::F32 && !val.blocked && !val.bf16_storage &&
              !users[static_cast<size_t>(v)].empty();
    for (NodeId c : users[static_cast<size_t>(v)]) {
      if (!ok) break;
      const Node& n = g.nodes[static_cast<size_t>(c)];
      if (bf16_product_operand(g, n, v)) continue;
      ok = n.def && n.def->alias && n.inputs[0] == v && n.has_output(0) && self(self, n.outputs[0]);
    }
    m = ok;
    return ok;
  };
  int64_t marked = 0;
  auto mark = [&](auto&& self, ValueId v) -> void {
    g.value(v).bf16_storage = true;
    ++marked;
    for (NodeId c : users[static_cast<size_t>(v)]) {
      const Node& n = g.nodes[static_cast<size_t>(c)];
      if (n.def && n.def->alias && n.inputs[0] == v) self(self, n.outputs[0]);
    }
  };
  for (const Node& n : g.nodes) {
    if (!n.def || n.inputs.empty() || n.inputs[0] == kNoValue) continue;
    const Value& x = g.value(n.inputs[0]);
    if (x.dtype != DType::F32 || x.bf16_storage || x.blocked) continue;
    const size_t outs = bf16_outputs(n);
    for (size_t o = 0; o < outs; ++o)
      if (n.has_output(o) && only_products(only_products, n.outputs[o])) mark(mark, n.outputs[o]);
  }
  return marked;
}

}  // namespace cb
