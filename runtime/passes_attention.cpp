// fuse_attention_heads (runtime/passes.h): attention's chains of per-head products and softmaxes
// as one AttentionHeads node, run a head at a time (runtime/ops/attention_heads.cpp).
#include <algorithm>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"
#include "runtime/passes.h"

namespace cb {

namespace {
using Heads = ops::AttentionHeadsParams;

// Elements of one [T, T] block at most: a block, and the dP / dS blocks beside it, stay in a
// core's cache (256 x 256 f32 is 256 KiB).
constexpr int64_t kMaxBlock = int64_t{1} << 18;

std::optional<Heads::Kind> step_kind(const Node& n) {
  if (!n.def) return std::nullopt;
  const std::string_view op = n.def->name;
  if (op == "MatMul" && n.inputs.size() == 2 && n.outputs.size() == 1) return Heads::Kind::MatMul;
  if (op == "MaskedSoftmax") return Heads::Kind::MaskedSoftmax;
  if (op == "MaskedSoftmaxGrad") return Heads::Kind::MaskedSoftmaxGrad;
  return std::nullopt;
}

// The batch dims a step runs over: a product's result's (through its y_perm) or the softmax's
// rows' but the last (every dim of X but the last two).
Shape batch_dims(const Graph& g, const Node& n, Heads::Kind k) {
  Shape s = g.value(n.outputs[0]).shape;
  if (k == Heads::Kind::MatMul) {
    const DimList& perm = n.p<ops::MatMulParams>().y_perm;
    if (!perm.empty()) {
      Shape logical(s.size());
      for (size_t i = 0; i < perm.size(); ++i) logical[static_cast<size_t>(perm[i])] = s[i];
      s = logical;
    }
  }
  if (s.size() < 2) return {};
  s.resize(s.size() - 2);
  return s;
}

// Whether step node `n` reads `v` (at input `in`) as one contiguous block per batch index: a
// product's operand not permuted and not broadcast, or a softmax's data input (not its mask).
bool reads_block(const Graph& g, const Node& n, Heads::Kind k, size_t in) {
  if (k == Heads::Kind::MaskedSoftmax) return in == 0;
  if (k == Heads::Kind::MaskedSoftmaxGrad) return in <= 1;
  const auto& mp = n.p<ops::MatMulParams>();
  if (!(in == 0 ? mp.a_perm : mp.b_perm).empty()) return false;
  return g.value(n.inputs[in]).shape.size() == g.value(n.outputs[0]).shape.size();
}

// How far apart, in node order, a chain's steps may be: a value read later (attention's P, by
// the backward pass) is kept as a tensor, and joins no chain there.
constexpr size_t kNear = 16;

// Union-find's root of node x.
int root(std::vector<int>& up, int x) {
  while (up[static_cast<size_t>(x)] != x) x = up[static_cast<size_t>(x)];
  return x;
}

// Finds the chains, and fuses the first one that can run as one node; false where none can.
bool fuse_one_chain(Graph& g) {
  const size_t nn = g.nodes.size(), nv = g.values.size();
  const auto users = g.consumers();
  std::vector<char> bound(nv, 0);
  for (ValueId v : g.outputs) bound[static_cast<size_t>(v)] = 1;
  std::vector<std::optional<Heads::Kind>> kinds(nn);
  std::vector<Shape> batch(nn);
  for (size_t k = 0; k < nn; ++k) {
    kinds[k] = step_kind(g.nodes[k]);
    if (kinds[k]) batch[k] = batch_dims(g, g.nodes[k], *kinds[k]);
  }
  // Steps join along f32 [..., T, T] values a step writes whole blocks of, per batch index, and
  // steps over the same batch read block by block. Such a value only such steps read, at most
  // kNear nodes after its writer, is a temporary; one read later or by others too (P, read again
  // by the backward pass) stays a tensor.
  std::vector<char> temp(nv, 0);
  std::vector<int> up(nn);
  std::iota(up.begin(), up.end(), 0);
  // Whether step c reads v (of batch dims vb) block by block.
  auto reads_blocks = [&](NodeId c, size_t v, const Shape& vb) {
    const auto ci = static_cast<size_t>(c);
    if (!kinds[ci] || batch[ci] != vb) return false;
    for (size_t i = 0; i < g.nodes[ci].inputs.size(); ++i)
      if (g.nodes[ci].inputs[i] == static_cast<ValueId>(v) &&
          !reads_block(g, g.nodes[ci], *kinds[ci], i))
        return false;
    return true;
  };
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = g.values[v];
    if (val.producer < 0 || val.blocked || val.dtype != DType::F32 || users[v].empty()) continue;
    const size_t r = val.shape.size();
    if (r < 3) continue;
    const Dim t0 = val.shape[r - 2], t1 = val.shape[r - 1];
    if (!t0.is_static() || !t1.is_static() || t0.value * t1.value > kMaxBlock) continue;
    const Shape vb(val.shape.begin(), val.shape.end() - 2);
    // Its writer, where a step, writes it block by block too (a product not through y_perm).
    const auto p = static_cast<size_t>(val.producer);
    const bool step_writes =
        kinds[p] && batch[p] == vb &&
        (*kinds[p] != Heads::Kind::MatMul || g.nodes[p].p<ops::MatMulParams>().y_perm.empty());
    bool all = step_writes && !bound[v];
    for (NodeId c : users[v])
      all = all && reads_blocks(c, v, vb) && static_cast<size_t>(c) <= p + kNear;
    const auto join = [&](size_t a, size_t b) {
      up[static_cast<size_t>(root(up, static_cast<int>(b)))] = root(up, static_cast<int>(a));
    };
    if (all) {
      temp[v] = 1;
      for (NodeId c : users[v]) join(p, static_cast<size_t>(c));
      continue;
    }
    // A tensor: its writer (where a step) and the steps reading its blocks, in node order, each
    // joined to the one before it where they are near (P's writer to the forward's product; the
    // backward's dV product to its MaskedSoftmaxGrad).
    std::vector<NodeId> readers = users[v];
    std::sort(readers.begin(), readers.end());
    std::optional<size_t> prev;
    if (step_writes) prev = p;
    for (NodeId c : readers) {
      const auto ci = static_cast<size_t>(c);
      if ((prev && ci == *prev) || !reads_blocks(c, v, vb)) continue;
      if (prev && ci <= *prev + kNear) join(*prev, ci);
      prev = ci;
    }
  }
  std::vector<std::vector<size_t>> groups(nn);
  for (size_t k = 0; k < nn; ++k)
    if (kinds[k]) groups[static_cast<size_t>(root(up, static_cast<int>(k)))].push_back(k);
  for (const std::vector<size_t>& grp : groups) {
    if (grp.size() < 2) continue;  // in index order
    const size_t first = grp.front(), last = grp.back();
    std::vector<char> in_group(nn, 0), after(nn, 0), made_after(nv, 0);
    for (size_t k : grp) in_group[k] = 1;
    // The fused node runs where the chain's last step ran. The other nodes between its first and
    // last step that read what the chain writes (a gradient's reshape), directly or not, move
    // after it; none of the chain's steps may read what they write.
    for (size_t k : grp)
      for (ValueId o : g.nodes[k].outputs)
        if (o != kNoValue) made_after[static_cast<size_t>(o)] = 1;
    bool ok = true;
    for (size_t k = first + 1; k <= last && ok; ++k) {
      const Node& n = g.nodes[k];
      if (in_group[k]) {
        for (ValueId v : n.inputs)
          ok = ok && (v == kNoValue || !made_after[static_cast<size_t>(v)] ||
                      in_group[static_cast<size_t>(g.value(v).producer)]);
        continue;
      }
      for (ValueId v : n.inputs)
        after[k] = after[k] || (v != kNoValue && made_after[static_cast<size_t>(v)]);
      if (after[k])
        for (ValueId o : n.outputs)
          if (o != kNoValue) made_after[static_cast<size_t>(o)] = 1;
    }
    if (!ok) continue;
    Node fused;
    Heads hp;
    std::vector<int32_t> temp_index(nv, -1), output_index(nv, -1);
    auto ref = [&](ValueId v) {
      const auto vi = static_cast<size_t>(v);
      if (temp[vi]) {
        if (temp_index[vi] < 0) {
          temp_index[vi] = static_cast<int32_t>(hp.temp_bf16.size());
          hp.temp_bf16.push_back(g.value(v).bf16_storage ? 1 : 0);
        }
        return Heads::Ref{Heads::Ref::From::Temp, temp_index[vi]};
      }
      if (output_index[vi] >= 0) return Heads::Ref{Heads::Ref::From::Output, output_index[vi]};
      auto it = std::find(fused.inputs.begin(), fused.inputs.end(), v);
      if (it == fused.inputs.end()) it = fused.inputs.insert(fused.inputs.end(), v);
      return Heads::Ref{Heads::Ref::From::Input, static_cast<int32_t>(it - fused.inputs.begin())};
    };
    for (size_t k : grp) {
      const Node& n = g.nodes[k];
      Heads::Step s;
      s.kind = *kinds[k];
      s.name = n.name;
      if (s.kind == Heads::Kind::MatMul)
        s.matmul = n.p<ops::MatMulParams>();
      else
        s.softmax = n.p<ops::MaskedSoftmaxParams>();
      for (ValueId v : n.inputs)
        if (v != kNoValue) s.in.push_back(ref(v));
      const ValueId o = n.outputs[0];
      if (temp[static_cast<size_t>(o)]) {
        s.out = ref(o);
        g.value(o).producer = -1;  // no node writes a temporary
      } else {
        output_index[static_cast<size_t>(o)] = static_cast<int32_t>(fused.outputs.size());
        fused.outputs.push_back(o);
        s.out = Heads::Ref{Heads::Ref::From::Output, output_index[static_cast<size_t>(o)]};
      }
      hp.steps.push_back(std::move(s));
    }
    fused.name = g.nodes[first].name + "+heads";
    fused.op_type = "AttentionHeads";
    fused.def = &ops::kAttentionHeads;
    fused.opset = kEmitOpset;
    fused.params = std::move(hp);
    // The new order: up to the chain, the nodes between that stay, the fused node, those that
    // move, the rest.
    std::vector<Node> nodes;
    nodes.reserve(nn - grp.size() + 1);
    for (size_t k = 0; k < first; ++k) nodes.push_back(std::move(g.nodes[k]));
    for (size_t k = first; k <= last; ++k)
      if (!in_group[k] && !after[k]) nodes.push_back(std::move(g.nodes[k]));
    nodes.push_back(std::move(fused));
    for (size_t k = first; k <= last; ++k)
      if (after[k]) nodes.push_back(std::move(g.nodes[k]));
    for (size_t k = last + 1; k < nn; ++k) nodes.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(nodes);
    for (size_t k = 0; k < g.nodes.size(); ++k)
      for (ValueId o : g.nodes[k].outputs)
        if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(k);
    return true;
  }
  return false;
}
}  // namespace

int64_t fuse_attention_heads(Graph& g) {
  int64_t made = 0;
  while (fuse_one_chain(g)) ++made;
  return made;
}

}  // namespace cb
