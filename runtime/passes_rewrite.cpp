// The graph passes that rewrite nodes into faster equivalents computing the same values (declared
// in runtime/passes.h): MatMul reading transposed operands in place, and the fused forms of what
// exporters spell out as several nodes (GELU, attention's scale + mask + Softmax), and
// BatchNormalization + Relu (with their gradients) as one pass over the activation.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"

namespace cb {

namespace {
// How many nodes read each value, a graph output counting as one more reader.
std::vector<int64_t> readers(const Graph& g) {
  std::vector<int64_t> uses(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++uses[static_cast<size_t>(v)];
  for (ValueId v : g.outputs) ++uses[static_cast<size_t>(v)];
  return uses;
}

// Removes the nodes k with drop[k] (their outputs already without readers), keeping the others'
// order, and sets every output's producer to its node's new index.
void remove_nodes(Graph& g, const std::vector<bool>& drop) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!drop[k]) kept.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(kept);
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (ValueId o : g.nodes[k].outputs)
      if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(k);
}

// Whether Transpose node t swaps the last two dims of its input and keeps the others.
bool swaps_last_two(const Graph& g, const Node& t) {
  const size_t r = g.value(t.inputs.at(0)).shape.size();
  if (r < 2) return false;
  const DimList& perm = std::any_cast<const ops::TransposeParams&>(t.params).perm;
  if (perm.empty()) return r == 2;  // reverse
  if (perm.size() != r) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

// The node producing `v` when it is op `op` and `v` has exactly one reader; else nullptr.
Node* sole_producer(Graph& g, const std::vector<int64_t>& uses, ValueId v, std::string_view op) {
  if (v == kNoValue || uses[static_cast<size_t>(v)] != 1) return nullptr;
  const NodeId p = g.value(v).producer;
  if (p < 0) return nullptr;
  Node& n = g.nodes[static_cast<size_t>(p)];
  return n.def && n.def->name == op ? &n : nullptr;
}

// A MatMul of two operands of rank >= 2: the products fold_matmul_transposes rewrites.
bool matrix_product(const Graph& g, const Node& n) {
  return n.def && n.def->name == "MatMul" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
         g.value(n.inputs[0]).shape.size() >= 2 && g.value(n.inputs[1]).shape.size() >= 2;
}

// The product only Transpose t reads, where it can write t's output instead (neither value
// blocked nor stored as bf16); else nullptr.
Node* product_under(Graph& g, const std::vector<int64_t>& uses, const Node& t) {
  Node* mm = sole_producer(g, uses, t.inputs[0], "MatMul");
  if (!mm || !matrix_product(g, *mm)) return nullptr;
  const Value &mid = g.value(t.inputs[0]), &out = g.value(t.outputs[0]);
  if (mid.blocked || mid.bf16_storage || out.blocked || out.bf16_storage) return nullptr;
  return mm;
}

// Transpose node t's permutation, completed (an empty perm reverses the dims).
DimList full_perm(const Graph& g, const Node& t) {
  DimList perm = std::any_cast<const ops::TransposeParams&>(t.params).perm;
  const auto r = static_cast<int64_t>(g.value(t.inputs.at(0)).shape.size());
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  return perm;
}

// Whether dims (r-2, r-1) of Transpose(x, perm), x row-major of rank r, form a matrix a product
// reads in place: one of them is x's last dim (stride 1), so it is row-major or transposed.
bool matrix_readable(const DimList& perm) {
  const size_t r = perm.size();
  return r >= 2 &&
         (perm[r - 1] == static_cast<int64_t>(r - 1) || perm[r - 2] == static_cast<int64_t>(r - 1));
}

// Whether MatMul n multiplies its whole batch as one product, the batch folded into A's rows (one
// right-hand matrix for every batch index: the CPU kernel's fast path). Read or written through
// a permutation it would multiply per batch index instead: other blocks, other rounding. Such
// products keep their Transposes.
bool batch_in_rows(const Graph& g, const Node& n) {
  const auto* mp = std::any_cast<ops::MatMulParams>(&n.params);
  const Shape &a = g.value(n.inputs[0]).shape, &b = g.value(n.inputs[1]).shape;
  if (a.size() <= 2 || (mp && mp->trans_a)) return false;
  for (size_t i = 0; i + 2 < b.size(); ++i)
    if (b[i] != Dim::of(1)) return false;
  return true;
}

bool is_identity(const DimList& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

int64_t fold_matmul_transposes(Graph& g, bool permuted) {
  std::vector<int64_t> uses = readers(g);
  int64_t folded = 0;
  for (Node& n : g.nodes) {
    if (!matrix_product(g, n)) continue;
    auto* mp = std::any_cast<ops::MatMulParams>(&n.params);
    ops::MatMulParams p = mp ? *mp : ops::MatMulParams{};
    for (size_t i = 0; i < 2; ++i) {
      // Through each Transpose of the last two dims: a transpose of a transpose (the backward's
      // dX = dY (W^T)^T where the forward read a weight W^T) reads W as it is.
      for (;;) {
        const ValueId in = n.inputs[i];
        const NodeId pr = g.value(in).producer;
        if (pr < 0) break;
        const Node& t = g.nodes[static_cast<size_t>(pr)];
        if (!t.def || t.def->name != "Transpose" || !swaps_last_two(g, t)) break;
        const ValueId src = t.inputs[0];
        if (g.value(src).blocked || g.value(src).bf16_storage) break;
        n.inputs[i] = src;
        --uses[static_cast<size_t>(in)];
        ++uses[static_cast<size_t>(src)];
        bool& trans = i == 0 ? p.trans_a : p.trans_b;
        trans = !trans;
        ++folded;
      }
    }
    n.params = p;
  }
  // A product only a Transpose of its last two dims reads (a weight's gradient dW = (dW^T)^T,
  // where the forward multiplied by W^T): (A B)^T = B^T A^T, so the MatMul multiplies the swapped
  // operands, each read transposed the other way, straight into the Transpose's output.
  std::vector<bool> absorbed(g.nodes.size(), false);
  // Product mm, with params p, writes Transpose k's output instead of the Transpose.
  auto absorb = [&](size_t k, Node& mm, ops::MatMulParams p) {
    const ValueId mid = g.nodes[k].inputs[0];
    mm.params = std::move(p);
    mm.outputs[0] = g.nodes[k].outputs[0];
    g.value(mid).producer = -1;
    --uses[static_cast<size_t>(mid)];
    absorbed[k] = true;
    ++folded;
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& t = g.nodes[k];
    if (!t.def || t.def->name != "Transpose" || t.outputs.size() != 1 || !swaps_last_two(g, t))
      continue;
    Node* mm = product_under(g, uses, t);
    if (!mm) continue;
    const auto* mp = std::any_cast<ops::MatMulParams>(&mm->params);
    ops::MatMulParams p = mp ? *mp : ops::MatMulParams{};
    const bool ta = p.trans_a, tb = p.trans_b;
    std::swap(mm->inputs[0], mm->inputs[1]);
    p.trans_a = !tb;
    p.trans_b = !ta;
    absorb(k, *mm, p);
  }
  if (permuted) {
    // Operands through any other Transpose whose result's last two dims a product can read in
    // place (a_perm / b_perm): the heads' [N,T,H,d] -> [N,H,T,d] and K's -> [N,H,d,T].
    for (Node& n : g.nodes) {
      if (!matrix_product(g, n) || batch_in_rows(g, n)) continue;
      auto* mp = std::any_cast<ops::MatMulParams>(&n.params);
      ops::MatMulParams p = mp ? *mp : ops::MatMulParams{};
      for (size_t i = 0; i < 2; ++i) {
        DimList& perm = i == 0 ? p.a_perm : p.b_perm;
        const ValueId in = n.inputs[i];
        const NodeId pr = g.value(in).producer;
        if (!perm.empty() || pr < 0) continue;
        const Node& t = g.nodes[static_cast<size_t>(pr)];
        if (!t.def || t.def->name != "Transpose") continue;
        const ValueId src = t.inputs[0];
        const DimList tp = full_perm(g, t);
        if (is_identity(tp) || !matrix_readable(tp) || g.value(src).blocked ||
            g.value(src).bf16_storage)
          continue;
        n.inputs[i] = src;
        --uses[static_cast<size_t>(in)];
        ++uses[static_cast<size_t>(src)];
        perm = tp;
        ++folded;
      }
      n.params = p;
    }
    // A product only a Transpose reads, where the Transpose's result (or its transpose) is a
    // row-major matrix of the product (y_perm): the heads' [N,H,T,d] -> [N,T,H,d] joined again.
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      Node& t = g.nodes[k];
      if (absorbed[k] || !t.def || t.def->name != "Transpose" || t.outputs.size() != 1) continue;
      Node* mm = product_under(g, uses, t);
      if (!mm || batch_in_rows(g, *mm)) continue;
      const auto* mp = std::any_cast<ops::MatMulParams>(&mm->params);
      ops::MatMulParams p = mp ? *mp : ops::MatMulParams{};
      const DimList tp = full_perm(g, t);
      // The stored result's last dim must be one of the product's two: Y or Y^T row-major.
      if (!p.y_perm.empty() || is_identity(tp) || tp.size() < 2) continue;
      const auto r = static_cast<int64_t>(tp.size());
      if (tp.back() != r - 1 && tp.back() != r - 2) continue;
      p.y_perm = tp;
      absorb(k, *mm, p);
    }
  }
  if (folded == 0) return 0;
  // The Transposes nothing reads any more go, and those a product absorbed; the values they made
  // stay (unread, unproduced). Last to first, so that a Transpose only a removed one read goes
  // too (W^T, where the backward's (W^T)^T was folded away).
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    dead[k] = absorbed[k] || (n.def && n.def->name == "Transpose" && n.outputs.size() == 1 &&
                              uses[static_cast<size_t>(n.outputs[0])] == 0);
    if (!dead[k] || absorbed[k]) continue;
    g.value(n.outputs[0]).producer = -1;
    for (ValueId in : n.inputs)
      if (in != kNoValue) --uses[static_cast<size_t>(in)];
  }
  remove_nodes(g, dead);
  return folded;
}

namespace {

// The value of a constant scalar (one float element), if `v` is one.
std::optional<double> scalar_of(const Graph& g, ValueId v) {
  const Value& c = g.value(v);
  if (!c.data || c.data->numel() != 1) return std::nullopt;
  if (c.dtype == DType::F32) return c.data->data<float>()[0];
  if (c.dtype == DType::F64) return c.data->data<double>()[0];
  return std::nullopt;
}

// Whether `v` is a constant scalar within 1e-6 relative of `want`.
bool is_scalar(const Graph& g, ValueId v, double want) {
  const std::optional<double> x = scalar_of(g, v);
  return x && std::abs(*x - want) <= 1e-6 * std::abs(want);
}

// The operand of binary node `n` that is not the constant `want`, or kNoValue.
ValueId other_than_scalar(const Graph& g, const Node& n, double want) {
  if (n.inputs.size() != 2) return kNoValue;
  if (is_scalar(g, n.inputs[1], want)) return n.inputs[0];
  if (is_scalar(g, n.inputs[0], want)) return n.inputs[1];
  return kNoValue;
}

// Whether a parameter may reach `v`: some value it is computed from is a float initializer or a
// float constant of more than one element (a weight stored as a Constant node).
bool parameter_may_reach(const Graph& g, ValueId v) {
  std::vector<bool> seen(g.values.size(), false);
  std::vector<ValueId> todo = {v};
  while (!todo.empty()) {
    const ValueId u = todo.back();
    todo.pop_back();
    if (u == kNoValue || seen[static_cast<size_t>(u)]) continue;
    seen[static_cast<size_t>(u)] = true;
    const Value& val = g.value(u);
    if (dtype_is_float(val.dtype) && val.data &&
        (val.initializer || (val.constant_node && val.data->numel() > 1)))
      return true;
    if (val.producer >= 0)
      for (ValueId in : g.nodes[static_cast<size_t>(val.producer)].inputs) todo.push_back(in);
  }
  return false;
}

// Whether `m` broadcasts to `x` (right-aligned, each dim 1 or equal).
bool broadcasts_to(const Shape& m, const Shape& x) {
  if (m.size() > x.size()) return false;
  for (size_t i = 0; i < m.size(); ++i) {
    const Dim a = m[m.size() - 1 - i], b = x[x.size() - 1 - i];
    if (!(a == Dim{1} || a == b)) return false;
  }
  return true;
}

}  // namespace

int64_t fuse_attention_softmax(Graph& g) {
  using Mask = ops::MaskedSoftmaxParams::Mask;
  std::vector<int64_t> uses = readers(g);
  int64_t made = 0;
  for (Node& sm : g.nodes) {
    if (!sm.def || sm.def->name != "Softmax" || sm.inputs.size() != 1) continue;
    const auto& sp = sm.p<ops::SoftmaxParams>();
    const Value& in = g.value(sm.inputs[0]);
    if (sp.coerce_2d || in.shape.empty() || sp.axis != static_cast<int64_t>(in.shape.size()) - 1)
      continue;
    if (in.dtype != DType::F32 && in.dtype != DType::F64) continue;
    ops::MaskedSoftmaxParams p;
    ValueId z = sm.inputs[0], mask = kNoValue;
    std::vector<Node*> dropped;
    if (Node* w = sole_producer(g, uses, z, "Where"); w && w->inputs.size() == 3) {
      const ValueId cond = w->inputs[0];
      if (g.value(cond).dtype == DType::Bool && broadcasts_to(g.value(cond).shape, in.shape)) {
        if (auto f = scalar_of(g, w->inputs[1]); f && g.value(w->inputs[2]).shape == in.shape) {
          p.mask = Mask::FillWhereTrue, p.fill = static_cast<float>(*f), z = w->inputs[2];
        } else if (auto f2 = scalar_of(g, w->inputs[2]);
                   f2 && g.value(w->inputs[1]).shape == in.shape) {
          p.mask = Mask::FillWhereFalse, p.fill = static_cast<float>(*f2), z = w->inputs[1];
        }
        if (p.mask != Mask::None) mask = cond, dropped.push_back(w);
      }
    } else if (Node* ad = sole_producer(g, uses, z, "Add"); ad && ad->inputs.size() == 2) {
      for (size_t i = 0; i < 2 && p.mask == Mask::None; ++i) {
        const ValueId s = ad->inputs[i], m = ad->inputs[1 - i];
        const Value& mv = g.value(m);
        if (g.value(s).shape != in.shape || mv.dtype != in.dtype ||
            !broadcasts_to(mv.shape, in.shape) || parameter_may_reach(g, m))
          continue;
        p.mask = Mask::Add, mask = m, z = s, dropped.push_back(ad);
      }
    }
    bool scaled = false;
    if (Node* mul = sole_producer(g, uses, z, "Mul"); mul && mul->inputs.size() == 2) {
      for (size_t i = 0; i < 2 && !scaled; ++i) {
        const auto c = scalar_of(g, mul->inputs[1 - i]);
        if (!c || g.value(mul->inputs[i]).shape != in.shape) continue;
        p.scale = static_cast<float>(*c), z = mul->inputs[i], scaled = true;
        dropped.push_back(mul);
      }
    }
    if (p.mask == Mask::None && !scaled) continue;  // a plain Softmax stays one
    sm.op_type = "MaskedSoftmax";
    sm.def = &ops::kMaskedSoftmax;
    sm.inputs = {z};
    if (mask != kNoValue) sm.inputs.push_back(mask);
    sm.attrs.clear();
    sm.params = p;
    for (Node* n : dropped)
      for (ValueId v : n->outputs)
        if (v != kNoValue) uses[static_cast<size_t>(v)] = 0;
    ++made;
  }
  return made;
}

int64_t fuse_gelu(Graph& g) {
  std::vector<int64_t> uses = readers(g);
  int64_t made = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& out = g.nodes[k];
    if (!out.def || out.def->name != "Mul" || out.inputs.size() != 2 || out.outputs.size() != 1)
      continue;
    // out = Mul(m, 0.5) with m = Mul(x, a), or out = Mul(h, a) with h = Mul(x, 0.5); a = Add(e, 1),
    // e = Erf(d), d = Div(x, sqrt 2) or Mul(x, 1/sqrt 2).
    ValueId x = kNoValue;
    std::vector<Node*> dropped;  // add, erf, div, then the other Mul
    auto erf_input_is = [&](ValueId av, ValueId want_x) -> bool {
      Node* add = sole_producer(g, uses, av, "Add");
      if (!add) return false;
      const ValueId ev = other_than_scalar(g, *add, 1.0);
      Node* erf = sole_producer(g, uses, ev, "Erf");
      if (!erf) return false;
      const ValueId dv = erf->inputs[0];
      Node* d = sole_producer(g, uses, dv, "Div");
      ValueId src = kNoValue;
      if (d && d->inputs.size() == 2 && is_scalar(g, d->inputs[1], std::sqrt(2.0)))
        src = d->inputs[0];
      if (!d) {
        d = sole_producer(g, uses, dv, "Mul");
        if (d) src = other_than_scalar(g, *d, std::sqrt(0.5));
      }
      if (src == kNoValue || (want_x != kNoValue && src != want_x)) return false;
      x = src;
      dropped.insert(dropped.end(), {add, erf, d});
      return true;
    };
    if (const ValueId mv = other_than_scalar(g, out, 0.5); mv != kNoValue) {
      // (x * a) * 0.5
      if (Node* m = sole_producer(g, uses, mv, "Mul"); m && m->inputs.size() == 2) {
        for (int i = 0; i < 2 && x == kNoValue; ++i) {
          dropped.clear();
          if (erf_input_is(m->inputs[static_cast<size_t>(1 - i)],
                           m->inputs[static_cast<size_t>(i)]))
            dropped.push_back(m);
        }
      }
    }
    if (x == kNoValue) {
      // (x * 0.5) * a
      for (int i = 0; i < 2 && x == kNoValue; ++i) {
        Node* h = sole_producer(g, uses, out.inputs[static_cast<size_t>(i)], "Mul");
        if (!h) continue;
        const ValueId hx = other_than_scalar(g, *h, 0.5);
        if (hx == kNoValue) continue;
        dropped.clear();
        if (erf_input_is(out.inputs[static_cast<size_t>(1 - i)], hx)) dropped.push_back(h);
      }
    }
    if (x == kNoValue) continue;
    const Value& xv = g.value(x);
    const Value& yv = g.value(out.outputs[0]);
    if (!dtype_is_float(xv.dtype) || xv.dtype != yv.dtype || xv.shape != yv.shape) continue;
    // Named after the scope of the Erf node (dropped[1]): "/blocks.0/mlp/mlp.1/Erf" -> ".../Gelu".
    const std::string& en = dropped[1]->name;
    const size_t slash = en.rfind('/');
    out.name = slash == std::string::npos ? en + "_gelu" : en.substr(0, slash + 1) + "Gelu";
    out.op_type = "Gelu";
    out.def = &ops::kGelu;
    out.inputs = {x};
    out.attrs.clear();
    out.params = ops::GeluParams{};
    // The dropped nodes' outputs lose their reader; fold_and_prune removes them as dead.
    for (Node* n : dropped)
      for (ValueId v : n->outputs)
        if (v != kNoValue) uses[static_cast<size_t>(v)] = 0;
    ++made;
  }
  return made;
}

namespace {

// The constant bound of Clip node `cl` (input 1 for min, 2 for max; before opset 11 its
// attribute), if it is one.
std::optional<double> clip_bound(const Graph& g, const Node& cl, size_t i) {
  if (cl.inputs.size() > i && cl.inputs[i] != kNoValue) return scalar_of(g, cl.inputs[i]);
  const auto& p = cl.p<ops::ClipParams>();
  return i == 1 ? p.min : p.max;
}

// The Clip half of fuse_batch_norm_relu: a BatchNormalization whose Y only a Clip with finite
// constant bounds reads, and in a training graph the ClipGrads of that Clip (which read Y), each
// feeding only the BatchNormalizationGrad of the same X and scale. All or nothing: the fused
// BatchNorm no longer writes Y, so every ClipGrad must fold. Marks the nodes dropped in `drop`.
int64_t fuse_batch_norm_clip(Graph& g, const std::vector<int64_t>& uses, std::vector<bool>& drop) {
  int64_t fused = 0;
  for (Node& cl : g.nodes) {
    if (!cl.def || cl.def->name != "Clip" || cl.outputs.size() != 1) continue;
    const ValueId y = cl.inputs[0], z = cl.outputs[0];
    const NodeId bp = g.value(y).producer;
    if (bp < 0) continue;
    Node& bn = g.nodes[static_cast<size_t>(bp)];
    if (!bn.def || bn.def->name != "BatchNormalization" || bn.outputs[0] != y ||
        bn.p<ops::BatchNormalizationParams>().relu)
      continue;
    const std::optional<double> lo = clip_bound(g, cl, 1), hi = clip_bound(g, cl, 2);
    if (!lo || !hi || !std::isfinite(*lo) || !std::isfinite(*hi) || !(*lo < *hi)) continue;
    const Value &yv = g.value(y), &zv = g.value(z);
    if (yv.dtype != DType::F32 || zv.dtype != yv.dtype || zv.shape != yv.shape) continue;
    // Y's other readers: ClipGrads of this Clip, each folding into its BatchNormalizationGrad.
    std::vector<std::pair<Node*, Node*>> grads;  // (ClipGrad, BatchNormalizationGrad)
    int64_t readers = 1;                         // the Clip
    bool foldable = true;
    for (Node& cg : g.nodes) {
      if (std::find(cg.inputs.begin(), cg.inputs.end(), y) == cg.inputs.end() || &cg == &cl)
        continue;
      ++readers;
      Node* bg = nullptr;
      if (cg.def && cg.def->name == "ClipGrad" && cg.inputs.size() >= 2 && cg.inputs[1] == y &&
          uses[static_cast<size_t>(cg.outputs[0])] == 1) {
        const ValueId dy = cg.outputs[0];
        for (Node& n : g.nodes)
          if (n.def && n.def->name == "BatchNormalizationGrad" && n.inputs.size() == 3 &&
              n.inputs[0] == dy && n.inputs[1] == bn.inputs[0] && n.inputs[2] == bn.inputs[1])
            bg = &n;
      }
      if (!bg) {
        foldable = false;
        break;
      }
      grads.emplace_back(&cg, bg);
    }
    if (!foldable || readers != uses[static_cast<size_t>(y)]) continue;
    auto mark = [&](Node& n) {
      auto& p = std::any_cast<ops::BatchNormalizationParams&>(n.params);
      p.relu = p.clip = true;
      p.clip_min = static_cast<float>(*lo);
      p.clip_max = static_cast<float>(*hi);
    };
    mark(bn);
    bn.outputs[0] = z;
    g.value(z).producer = bp;
    g.value(y).producer = -1;
    drop[static_cast<size_t>(&cl - g.nodes.data())] = true;
    for (auto [cg, bg] : grads) {
      mark(*bg);
      bg->inputs = {cg->inputs[0], bg->inputs[1], bg->inputs[2], z};
      g.value(cg->outputs[0]).producer = -1;
      drop[static_cast<size_t>(cg - g.nodes.data())] = true;
    }
    ++fused;
  }
  return fused;
}

// The residual half of fuse_batch_norm_relu: Add(Y, R) of a BatchNormalization's Y (no
// activation fused yet, Y read only by that Add, the Add's operands and output of one shape)
// becomes the BatchNorm with R as its sixth input (`residual`), moved to the Add's place (R may
// be computed after the BatchNorm: a bottleneck's shortcut); a Relu that alone reads the sum
// becomes its activation too. The gradients do not change: Add's passes dY through, and
// ReluGrad reads the Relu's output, which the fused node writes. Marks the nodes dropped.
int64_t fuse_batch_norm_add(Graph& g, const std::vector<int64_t>& uses, std::vector<bool>& drop) {
  int64_t fused = 0;
  for (size_t ai = 0; ai < g.nodes.size(); ++ai) {
    Node& add = g.nodes[ai];
    if (drop[ai] || !add.def || add.def->name != "Add" || add.inputs.size() != 2 ||
        add.outputs.size() != 1 || add.inputs[0] == add.inputs[1])
      continue;
    const ValueId sum = add.outputs[0];
    Node* bn = nullptr;
    ValueId y = kNoValue, r = kNoValue;
    for (size_t i = 0; i < 2 && !bn; ++i) {
      Node* b = sole_producer(g, uses, add.inputs[i], "BatchNormalization");
      if (!b || b->outputs[0] != add.inputs[i] || b->inputs.size() != 5) continue;
      const auto& p = b->p<ops::BatchNormalizationParams>();
      const Value &yv = g.value(add.inputs[i]), &rv = g.value(add.inputs[1 - i]),
                  &sv = g.value(sum);
      if (p.relu || p.residual || !yv.shape_known || yv.shape != sv.shape || rv.shape != sv.shape ||
          yv.dtype != sv.dtype || rv.dtype != sv.dtype)
        continue;
      bn = b, y = add.inputs[i], r = add.inputs[1 - i];
    }
    if (!bn) continue;
    // Moved to the Add's place, the BatchNorm must not have readers in between (of its running
    // statistics, say).
    const size_t bi = static_cast<size_t>(bn - g.nodes.data());
    bool read_between = false;
    for (size_t k = bi + 1; k < ai && !read_between; ++k)
      for (ValueId v : g.nodes[k].inputs)
        read_between = read_between ||
                       (v != kNoValue &&
                        std::find(bn->outputs.begin(), bn->outputs.end(), v) != bn->outputs.end());
    if (read_between) continue;
    // The Relu that alone reads the sum.
    Node* relu = nullptr;
    if (uses[static_cast<size_t>(sum)] == 1)
      for (size_t k = ai + 1; k < g.nodes.size() && !relu; ++k) {
        Node& n = g.nodes[k];
        if (drop[k] || std::find(n.inputs.begin(), n.inputs.end(), sum) == n.inputs.end()) continue;
        if (n.def && n.def->name == "Relu" && n.inputs.size() == 1 && n.outputs.size() == 1 &&
            g.value(n.outputs[0]).shape == g.value(sum).shape &&
            g.value(n.outputs[0]).dtype == g.value(sum).dtype)
          relu = &n;
        else
          break;
      }
    Node moved = std::move(*bn);
    auto& p = std::any_cast<ops::BatchNormalizationParams&>(moved.params);
    p.residual = true;
    moved.inputs.push_back(r);
    moved.outputs[0] = sum;
    g.value(y).producer = -1;
    if (relu) {
      p.relu = true;
      moved.outputs[0] = relu->outputs[0];
      g.value(sum).producer = -1;
      drop[static_cast<size_t>(relu - g.nodes.data())] = true;
    }
    for (ValueId o : moved.outputs)
      if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(ai);
    add = std::move(moved);
    drop[bi] = true;
    ++fused;
  }
  return fused;
}

}  // namespace

int64_t fuse_batch_norm_relu(Graph& g) {
  const std::vector<int64_t> uses = readers(g);
  std::vector<bool> drop(g.nodes.size(), false);
  int64_t fused = 0;
  // Forward: BatchNormalization whose Y only a Relu reads writes the Relu's output itself.
  for (Node& r : g.nodes) {
    if (!r.def || r.def->name != "Relu" || r.inputs.size() != 1 || r.outputs.size() != 1) continue;
    Node* bn = sole_producer(g, uses, r.inputs[0], "BatchNormalization");
    if (!bn || bn->outputs[0] != r.inputs[0]) continue;
    const Value &y = g.value(r.inputs[0]), &z = g.value(r.outputs[0]);
    if (y.dtype != z.dtype || y.shape != z.shape) continue;
    std::any_cast<ops::BatchNormalizationParams&>(bn->params).relu = true;
    bn->outputs[0] = r.outputs[0];
    g.value(r.outputs[0]).producer = g.value(r.inputs[0]).producer;
    g.value(r.inputs[0]).producer = -1;
    drop[static_cast<size_t>(&r - g.nodes.data())] = true;
    ++fused;
  }
  // Backward: ReluGrad(dZ, Z) of such a Z, read only by the BatchNormalizationGrad of the same
  // X and scale as its dY, folds into it: BatchNormalizationGrad(dZ, X, scale, Z), masked by
  // Z > 0 as ReluGrad masks.
  for (Node& rg : g.nodes) {
    if (!rg.def || rg.def->name != "ReluGrad" || rg.inputs.size() != 2) continue;
    const ValueId zv = rg.inputs[1], dy = rg.outputs[0];
    const NodeId zp = g.value(zv).producer;
    if (zp < 0 || uses[static_cast<size_t>(dy)] != 1) continue;
    const Node& bn = g.nodes[static_cast<size_t>(zp)];
    if (!bn.def || bn.def->name != "BatchNormalization" ||
        !bn.p<ops::BatchNormalizationParams>().relu || bn.outputs[0] != zv)
      continue;
    auto reader = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
      return std::find(n.inputs.begin(), n.inputs.end(), dy) != n.inputs.end();
    });
    if (reader == g.nodes.end() || !reader->def || reader->def->name != "BatchNormalizationGrad" ||
        reader->inputs.size() != 3 || reader->inputs[0] != dy ||
        reader->inputs[1] != bn.inputs[0] || reader->inputs[2] != bn.inputs[1])
      continue;
    std::any_cast<ops::BatchNormalizationParams&>(reader->params).relu = true;
    reader->inputs = {rg.inputs[0], reader->inputs[1], reader->inputs[2], zv};
    g.value(dy).producer = -1;
    drop[static_cast<size_t>(&rg - g.nodes.data())] = true;
  }
  fused += fuse_batch_norm_clip(g, uses, drop);
  fused += fuse_batch_norm_add(g, uses, drop);
  if (fused == 0) return 0;
  remove_nodes(g, drop);
  return fused;
}

int64_t save_batch_norm_statistics(Graph& g) {
  int64_t wired = 0;
  const size_t nodes = g.nodes.size();  // add_value may grow values, never nodes
  for (size_t gi = 0; gi < nodes; ++gi) {
    if (!g.nodes[gi].def || g.nodes[gi].def->name != "BatchNormalizationGrad" ||
        g.nodes[gi].inputs.size() > 4)
      continue;
    const ValueId x = g.nodes[gi].inputs[1], scale = g.nodes[gi].inputs[2];
    Node* bn = nullptr;
    for (Node& n : g.nodes)
      if (n.def && n.def->name == "BatchNormalization" && n.inputs[0] == x &&
          n.inputs[1] == scale && n.p<ops::BatchNormalizationParams>().training)
        bn = &n;
    if (!bn || g.value(x).dtype != DType::F32) continue;
    if (!bn->has_output(5)) {
      const Value& y = g.value(bn->outputs[0]);
      Value st;
      st.name = y.name + "/batch_statistics";
      st.dtype = DType::F64;
      st.shape = {Dim::of(4), g.value(x).shape[1]};
      st.shape_known = true;
      st.producer = static_cast<NodeId>(bn - g.nodes.data());
      const ValueId v = g.add_value(std::move(st));
      bn->outputs.resize(6, kNoValue);
      bn->outputs[5] = v;
    }
    Node& bg = g.nodes[gi];
    const ValueId stats = bn->outputs[5];
    bg.inputs.resize(5, kNoValue);
    bg.inputs[4] = stats;
    ++wired;
  }
  return wired;
}

}  // namespace cb
