#include "runtime/passes.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "runtime/error.h"
#include "runtime/graph_builder.h"
#include "runtime/lower.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"

namespace cb {

namespace {
bool is_constant_output(const Value& v) { return v.data || v.known; }

// How many nodes read each value, a graph output counting as one more reader.
std::vector<int64_t> readers(const Graph& g) {
  std::vector<int64_t> uses(g.values.size(), 0);
  for (const Node& n : g.nodes)
    for (ValueId v : n.inputs)
      if (v != kNoValue) ++uses[static_cast<size_t>(v)];
  for (ValueId v : g.outputs) ++uses[static_cast<size_t>(v)];
  return uses;
}

TensorPtr materialize(const Value& v) {
  auto t = std::make_shared<Tensor>();
  t->dtype = v.dtype;
  for (const Dim& d : v.shape) t->dims.push_back(d.value);
  t->bytes.resize(static_cast<size_t>(t->numel()) * dtype_size(v.dtype));
  for (size_t i = 0; i < v.known->size(); ++i) {
    int64_t x = (*v.known)[i].value;
    switch (v.dtype) {
      case DType::I64:
        t->data<int64_t>()[i] = x;
        break;
      case DType::I32:
        t->data<int32_t>()[i] = static_cast<int32_t>(x);
        break;
      case DType::I8:
        t->data<int8_t>()[i] = static_cast<int8_t>(x);
        break;
      default:
        t->data<uint8_t>()[i] = static_cast<uint8_t>(x);
        break;  // u8, bool
    }
  }
  return t;
}
}  // namespace

FoldStats fold_and_prune(Graph& g) {
  FoldStats st;
  std::vector<bool> keep(g.nodes.size(), true);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (!node.def) continue;
    bool all = true;
    for (ValueId o : node.outputs)
      if (o != kNoValue && !(g.value(o).shape_known && is_constant_output(g.value(o)))) all = false;
    if (!all) continue;
    keep[n] = false;
    ++st.folded;
    for (ValueId o : node.outputs) {
      if (o == kNoValue) continue;
      Value& v = g.value(o);
      v.kind = ValueKind::Constant;
      v.producer = -1;
      if (!v.data && shape_is_static(v.shape) &&
          std::all_of(v.known->begin(), v.known->end(), [](Dim d) { return !d.batch; }))
        v.data = materialize(v);
    }
  }
  // Liveness backwards from the graph outputs.
  std::vector<bool> live(g.values.size(), false);
  for (ValueId o : g.outputs) live[static_cast<size_t>(o)] = true;
  for (size_t n = g.nodes.size(); n-- > 0;) {
    if (!keep[n]) continue;
    bool any = false;
    for (ValueId o : g.nodes[n].outputs)
      if (o != kNoValue && live[static_cast<size_t>(o)]) any = true;
    if (!any) {
      keep[n] = false;
      ++st.dead;
      continue;
    }
    for (ValueId i : g.nodes[n].inputs)
      if (i != kNoValue) live[static_cast<size_t>(i)] = true;
    for (ValueId o : g.nodes[n].outputs)
      if (o != kNoValue) live[static_cast<size_t>(o)] = true;
  }
  for (ValueId i : g.inputs) live[static_cast<size_t>(i)] = true;
  // Compact values and nodes, remapping ids.
  std::vector<ValueId> remap(g.values.size(), kNoValue);
  std::vector<Value> values;
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (!live[v]) continue;
    remap[v] = static_cast<ValueId>(values.size());
    values.push_back(std::move(g.values[v]));
  }
  std::vector<Node> nodes;
  auto map_ids = [&](std::vector<ValueId>& ids) {
    for (ValueId& id : ids)
      if (id != kNoValue) id = remap[static_cast<size_t>(id)];
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (!keep[n]) continue;
    Node node = std::move(g.nodes[n]);
    map_ids(node.inputs);
    map_ids(node.outputs);
    for (ValueId o : node.outputs)
      if (o != kNoValue)
        values[static_cast<size_t>(o)].producer = static_cast<NodeId>(nodes.size());
    nodes.push_back(std::move(node));
  }
  g.values = std::move(values);
  g.nodes = std::move(nodes);
  map_ids(g.inputs);
  map_ids(g.outputs);
  return st;
}

int64_t lower_composites(Graph& g) {
  int64_t lowered = 0;
  size_t i = 0;
  while (i < g.nodes.size()) {
    const Node& node = g.nodes[i];
    // Downstream of an op the catalog lacks (lenient imports), shapes are unknown: left as is.
    bool known = std::all_of(node.inputs.begin(), node.inputs.end(),
                             [&](ValueId v) { return v == kNoValue || g.value(v).shape_known; });
    if (!node.def || !node.def->lower || !known) {
      ++i;
      continue;
    }
    const size_t first = g.nodes.size();
    const std::vector<ValueId> outputs = g.nodes[i].outputs;
    GraphBuilder b(g, g.nodes[i].name);
    std::vector<ValueId> results;
    {
      LowerCtx c(b, static_cast<NodeId>(i));
      results = g.nodes[i].def->lower(c);
    }
    CB_CHECK(results.size() == outputs.size());
    // Each kept output becomes an output of the node computing its stand-in; a stand-in that is
    // not a fresh node's output (an existing value), or stands for two outputs, gets an Identity.
    std::vector<bool> taken(g.values.size(), false);
    for (size_t k = 0; k < outputs.size(); ++k) {
      ValueId o = outputs[k], r = results[k];
      if (o == kNoValue) continue;
      CB_CHECK(r != kNoValue);
      NodeId p = g.value(r).producer;
      if (p < static_cast<NodeId>(first) ||
          (static_cast<size_t>(r) < taken.size() && taken[static_cast<size_t>(r)])) {
        r = b.op("Identity", {r});
        p = g.value(r).producer;
      }
      if (static_cast<size_t>(r) < taken.size()) taken[static_cast<size_t>(r)] = true;
      const Value &want = g.value(o), &got = g.value(r);
      if (want.dtype != got.dtype || want.shape != got.shape)
        throw InternalError(fmt::format("{}: its decomposition gives output {} as {} {}, not {} {}",
                                        g.node_label(static_cast<NodeId>(i)), k,
                                        dtype_name(got.dtype), to_string(got.shape),
                                        dtype_name(want.dtype), to_string(want.shape)));
      for (size_t n = first; n < g.nodes.size(); ++n) {
        for (ValueId& in : g.nodes[n].inputs)
          if (in == r) in = o;
        for (ValueId& out : g.nodes[n].outputs)
          if (out == r) out = o;
      }
      g.value(r).producer = -1;
    }
    // The fresh nodes take the lowered node's place.
    std::vector<Node> fresh(std::make_move_iterator(g.nodes.begin() + static_cast<long>(first)),
                            std::make_move_iterator(g.nodes.end()));
    g.nodes.resize(first);
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    g.nodes.insert(g.nodes.begin() + static_cast<long>(i), std::make_move_iterator(fresh.begin()),
                   std::make_move_iterator(fresh.end()));
    for (size_t n = 0; n < g.nodes.size(); ++n)
      for (ValueId o : g.nodes[n].outputs)
        if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(n);
    i += fresh.size();
    ++lowered;
  }
  return lowered;
}

void classify_initializers(Graph& g) {
  auto consumers = g.consumers();
  // Is `v` produced by a node with a weight input (Conv, Gemm, MatMul...)? Then a constant
  // added to it is that layer's bias.
  auto from_weight_op = [&](ValueId v) {
    if (v == kNoValue || g.value(v).producer < 0) return false;
    const Node& p = g.nodes[static_cast<size_t>(g.value(v).producer)];
    return p.def && p.def->weight_inputs != 0;
  };
  for (size_t v = 0; v < g.values.size(); ++v) {
    Value& val = g.values[v];
    // A Constant node's output counts once folded (it is then data without a producer).
    const bool constant_node = val.constant_node && val.data && val.producer < 0;
    if (!val.initializer && !constant_node) continue;
    bool param = false, state = false;
    for (NodeId n : consumers[v]) {
      const Node& node = g.nodes[static_cast<size_t>(n)];
      if (!node.def) {
        param = param || val.initializer;  // unknown op: assume trainable, as PyTorch would
        continue;
      }
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] != static_cast<ValueId>(v)) continue;
        uint32_t b = 1u << i;
        if (node.def->state_inputs & b)
          state = true;
        else if ((node.def->nondiff_inputs | node.def->value_inputs) & b)
          continue;
        else if (val.initializer || (node.def->weight_inputs & b))
          param = true;
        else if (node.op_type == "Add" && node.inputs.size() == 2 &&
                 from_weight_op(node.inputs[1 - i]))
          param = true;
      }
    }
    if (state)
      val.kind = ValueKind::State;
    else if (param && dtype_is_float(val.dtype))
      val.kind = ValueKind::Parameter;
    else
      val.kind = ValueKind::Constant;
  }
}

int64_t freeze_parameters(Graph& g, const std::vector<std::string>& patterns) {
  int64_t frozen = 0;
  for (const std::string& pat : patterns) {
    int64_t matched = 0;
    for (Value& v : g.values) {
      if (v.kind != ValueKind::Parameter && !(v.kind == ValueKind::Constant && v.data)) continue;
      if (fnmatch(pat.c_str(), v.name.c_str(), 0) != 0) continue;
      if (v.kind == ValueKind::Parameter) {
        v.kind = ValueKind::Constant;
        ++frozen;
      }
      ++matched;  // matching an already frozen tensor is fine (overlapping patterns)
    }
    if (matched == 0) {
      std::string some;
      int shown = 0;
      for (const Value& v : g.values)
        if (v.kind == ValueKind::Parameter && shown++ < 5)
          some += fmt::format("{}'{}'", some.empty() ? "" : ", ", v.name);
      fail("--freeze '{}' matches no parameter (parameters include {}{})", pat,
           some.empty() ? "none" : some, shown > 5 ? ", ..." : "");
    }
  }
  return frozen;
}

void set_training(Graph& g, bool training) {
  for (Node& n : g.nodes)
    if (n.def && n.def->set_training) n.def->set_training(n, training);
}

Precision parse_precision(const std::string& s) {
  if (s == "f32" || s == "fp32") return Precision::F32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp16" || s == "f16")
    fail(
        "--precision {}: fp16 (with loss scaling) is not implemented; bf16 needs no loss "
        "scaling and is the mixed precision crossbow has (f32 or bf16)",
        s);
  fail("--precision {}: expected f32 or bf16", s);
}

namespace {

// For node n: per input and output slot, 0 when its kernel reads / writes only the plain layout,
// else a class k > 0: the node's slots of one class share one layout (their kernels index them
// alike), slots of different classes are independent (Conv reorders each of its own).
struct LayoutSlots {
  std::vector<int> in, out;
  bool conv = false;  // a Conv or ConvGrad: where the blocked layout saves reorders
};

LayoutSlots layout_slots(const Graph& g, const Node& n) {
  LayoutSlots s{std::vector<int>(n.inputs.size(), 0), std::vector<int>(n.outputs.size(), 0)};
  if (!n.def) return s;
  const std::string_view op = n.def->name;
  auto set = [](std::vector<int>& v, size_t i, int k) {
    if (i < v.size()) v[i] = k;
  };
  if (op == "Conv") {
    set(s.in, 0, 1);
    set(s.out, 0, 2);
    s.conv = true;
  } else if (op == "ConvGrad") {
    set(s.in, 0, 1);
    set(s.in, 1, 2);
    set(s.out, 0, 3);
    s.conv = true;
  } else if (op == "BatchNormalization" || op == "Relu" || op == "Clip") {
    set(s.in, 0, 1);  // Clip's bounds (inputs 1, 2) are scalars: plain
    set(s.out, 0, 1);
  } else if (op == "BatchNormalizationGrad" || op == "ReluGrad" || op == "ClipGrad") {
    set(s.in, 0, 1);
    set(s.in, 1, 1);
    set(s.out, 0, 1);
  } else if (op == "Add" && n.inputs.size() == 2 && n.outputs.size() == 1 &&
             n.inputs[0] != kNoValue && n.inputs[1] != kNoValue &&
             g.value(n.inputs[0]).shape == g.value(n.outputs[0]).shape &&
             g.value(n.inputs[1]).shape == g.value(n.outputs[0]).shape) {
    set(s.in, 0, 1);
    set(s.in, 1, 1);
    set(s.out, 0, 1);
  }
  return s;
}

// An activation that can be stored blocked: f32 [N, C, H, W], C a multiple of 16.
bool blockable(const Graph& g, ValueId v) {
  const Value& x = g.value(v);
  if (x.kind != ValueKind::Activation || x.dtype != DType::F32 || !x.shape_known) return false;
  const Shape& s = x.shape;
  return s.size() == 4 && s[1].is_static() && s[1].value > 0 && s[1].value % 16 == 0 &&
         s[2].is_static() && s[3].is_static();
}

ValueId find_root(std::vector<ValueId>& parent, ValueId v) {
  while (parent[static_cast<size_t>(v)] != v) {
    parent[static_cast<size_t>(v)] = parent[static_cast<size_t>(parent[static_cast<size_t>(v)])];
    v = parent[static_cast<size_t>(v)];
  }
  return v;
}

}  // namespace

LayoutStats assign_blocked_layouts(Graph& g, bool bf16_storage) {
  const size_t nv = g.values.size();
  std::vector<ValueId> parent(nv);
  for (size_t v = 0; v < nv; ++v) parent[v] = static_cast<ValueId>(v);
  std::vector<LayoutSlots> slots;
  for (const Node& n : g.nodes) slots.push_back(layout_slots(g, n));
  // Groups: values a node reads and writes with one indexing.
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    std::map<int, ValueId> first;
    auto join = [&](ValueId v, int cls) {
      if (v == kNoValue || cls == 0) return;
      auto [it, fresh] = first.emplace(cls, v);
      if (!fresh) parent[static_cast<size_t>(find_root(parent, v))] = find_root(parent, it->second);
    };
    for (size_t i = 0; i < n.inputs.size(); ++i) join(n.inputs[i], slots[k].in[i]);
    for (size_t o = 0; o < n.outputs.size(); ++o) join(n.outputs[o], slots[k].out[o]);
  }
  // A group is blocked when every member can be and one of them is a conv's operand.
  std::vector<char> can(nv, 1), conv(nv, 0);
  for (size_t v = 0; v < nv; ++v)
    if (!blockable(g, static_cast<ValueId>(v))) can[find_root(parent, static_cast<ValueId>(v))] = 0;
  for (ValueId v : g.inputs) can[find_root(parent, v)] = 0;
  for (ValueId v : g.outputs) can[find_root(parent, v)] = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (!slots[k].conv) continue;
    const Node& n = g.nodes[k];
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] != kNoValue && slots[k].in[i]) conv[find_root(parent, n.inputs[i])] = 1;
    for (size_t o = 0; o < n.outputs.size(); ++o)
      if (n.outputs[o] != kNoValue && slots[k].out[o]) conv[find_root(parent, n.outputs[o])] = 1;
  }
  LayoutStats stats;
  std::vector<char> blocked(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    const ValueId r = find_root(parent, static_cast<ValueId>(v));
    blocked[v] = can[r] && conv[r];
    stats.blocked += blocked[v];
  }
  if (stats.blocked == 0) return stats;

  // Reorders where a plain-only op meets a blocked value, each placed right after the node that
  // makes its input (so the order stays topological).
  const OpDef* reorder = find_op("LayoutReorder");
  CB_CHECK(reorder);
  std::vector<std::vector<Node>> after(g.nodes.size());
  auto make = [&](ValueId from, ValueId to, bool to_blocked) {
    Node r;
    r.name = g.value(to).name;
    r.op_type = "LayoutReorder";
    r.def = reorder;
    r.opset = kEmitOpset;
    r.inputs = {from};
    r.outputs = {to};
    r.params = ops::LayoutParams{to_blocked};
    ++stats.reorders;
    return r;
  };
  auto fresh_value = [&](ValueId like, const std::string& suffix) {
    Value x = g.value(like);
    x.name += suffix;
    x.blocked = false;
    x.bf16_storage = false;
    return g.add_value(std::move(x));
  };
  const auto users = g.consumers();
  for (size_t v = 0; v < nv; ++v) {
    if (!blocked[v]) continue;
    const auto id = static_cast<ValueId>(v);
    const NodeId p = g.value(id).producer;
    CB_CHECK(p >= 0);  // an activation
    Node& prod = g.nodes[static_cast<size_t>(p)];
    size_t o = 0;
    while (prod.outputs[o] != id) ++o;
    ValueId plain = kNoValue;                         // a plain copy, made once
    if (slots[static_cast<size_t>(p)].out[o] == 0) {  // the producer writes plain: reorder after
      plain = fresh_value(id, "/plain");
      prod.outputs[o] = plain;
      after[static_cast<size_t>(p)].push_back(make(plain, id, true));
    }
    for (NodeId c : users[v]) {
      Node& user = g.nodes[static_cast<size_t>(c)];
      for (size_t i = 0; i < user.inputs.size(); ++i) {
        if (user.inputs[i] != id || slots[static_cast<size_t>(c)].in[i] != 0) continue;
        if (plain == kNoValue) {
          plain = fresh_value(id, "/plain");
          after[static_cast<size_t>(p)].push_back(make(id, plain, false));
        }
        user.inputs[i] = plain;
      }
    }
  }
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + static_cast<size_t>(stats.reorders));
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    nodes.push_back(std::move(g.nodes[k]));
    for (Node& r : after[k]) nodes.push_back(std::move(r));
  }
  g.nodes = std::move(nodes);
  for (size_t v = 0; v < nv; ++v) {
    g.values[v].blocked = blocked[v];
    g.values[v].bf16_storage = blocked[v] && bf16_storage;
  }
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (ValueId o : g.nodes[k].outputs)
      if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(k);
  return stats;
}

namespace {
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
}  // namespace

int64_t fold_matmul_transposes(Graph& g) {
  std::vector<int64_t> uses = readers(g);
  int64_t folded = 0;
  for (Node& n : g.nodes) {
    if (!n.def || n.def->name != "MatMul" || n.inputs.size() != 2) continue;
    if (g.value(n.inputs[0]).shape.size() < 2 || g.value(n.inputs[1]).shape.size() < 2) continue;
    auto* mp = std::any_cast<ops::MatMulParams>(&n.params);
    ops::MatMulParams p = mp ? *mp : ops::MatMulParams{};
    for (size_t i = 0; i < 2; ++i) {
      const ValueId in = n.inputs[i];
      const NodeId pr = g.value(in).producer;
      if (pr < 0 || (i == 0 ? p.trans_a : p.trans_b)) continue;
      const Node& t = g.nodes[static_cast<size_t>(pr)];
      if (!t.def || t.def->name != "Transpose" || !swaps_last_two(g, t)) continue;
      const ValueId src = t.inputs[0];
      if (g.value(src).blocked || g.value(src).bf16_storage) continue;
      n.inputs[i] = src;
      --uses[static_cast<size_t>(in)];
      ++uses[static_cast<size_t>(src)];
      (i == 0 ? p.trans_a : p.trans_b) = true;
      ++folded;
    }
    n.params = p;
  }
  if (folded == 0) return 0;
  // The Transposes nothing reads any more go; the values they made stay (unread, unproduced).
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (Node& n : g.nodes) {
    const bool dead = n.def && n.def->name == "Transpose" && n.outputs.size() == 1 &&
                      uses[static_cast<size_t>(n.outputs[0])] == 0;
    if (dead)
      g.value(n.outputs[0]).producer = -1;
    else
      kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (ValueId o : g.nodes[k].outputs)
      if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(k);
  return folded;
}

namespace {

// The node producing `v` when it is op `op` and `v` has exactly one reader; else nullptr.
Node* sole_producer(Graph& g, const std::vector<int64_t>& uses, ValueId v, std::string_view op) {
  if (v == kNoValue || uses[static_cast<size_t>(v)] != 1) return nullptr;
  const NodeId p = g.value(v).producer;
  if (p < 0) return nullptr;
  Node& n = g.nodes[static_cast<size_t>(p)];
  return n.def && n.def->name == op ? &n : nullptr;
}

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

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "f32"; }

int64_t set_compute_precision(Graph& g, Precision p) {
  int64_t marked = 0;
  for (Node& n : g.nodes) {
    if (!n.def) continue;
    const std::string_view op = n.def->name;
    const bool conv = op == "Conv" || op == "ConvGrad";
    if (!conv && op != "Gemm" && op != "MatMul") continue;
    const ValueId x = n.inputs.at(op == "ConvGrad" ? 1 : 0);
    const bool bf16 = p == Precision::BF16 && g.value(x).dtype == DType::F32;
    if (conv)
      std::any_cast<ops::ConvParams&>(n.params).bf16 = bf16;
    else if (op == "Gemm")
      std::any_cast<ops::GemmParams&>(n.params).bf16 = bf16;
    else if (auto* mp = std::any_cast<ops::MatMulParams>(&n.params))
      mp->bf16 = bf16;
    else
      n.params = ops::MatMulParams{bf16};
    marked += bf16;
  }
  return marked;
}

}  // namespace cb
