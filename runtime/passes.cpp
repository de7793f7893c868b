#include "runtime/passes.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/error.h"
#include "runtime/graph_builder.h"
#include "runtime/lower.h"
#include "runtime/op_catalog.h"
#include "runtime/ops/params.h"

namespace cb {

namespace {
bool is_constant_output(const Value& v) { return v.data || v.known; }

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

ConvAlgorithm parse_conv_algorithm(const std::string& s) {
  if (s == "auto") return ConvAlgorithm::Auto;
  if (s == "direct") return ConvAlgorithm::Direct;
  fail("--conv-algorithm {}: expected auto (Winograd where it is faster) or direct", s);
}

const char* conv_algorithm_name(ConvAlgorithm a) {
  return a == ConvAlgorithm::Direct ? "direct" : "auto";
}

int64_t choose_conv_algorithms(Graph& g) {
  int64_t marked = 0;
  for (Node& n : g.nodes) {
    if (!n.def || (n.def->name != "Conv" && n.def->name != "ConvGrad")) continue;
    auto& p = std::any_cast<ops::ConvParams&>(n.params);
    const bool grad = n.def->name == "ConvGrad";
    const Value& x = g.value(n.inputs.at(grad ? 1 : 0));
    const Value& w = g.value(n.inputs.at(grad ? 2 : 1));
    const Value& y = g.value(grad ? n.inputs.at(0) : n.outputs.at(0));
    auto fixed = [](const Value& v, size_t i) {  // 0 where not static
      return v.shape[i].is_static() ? v.shape[i].value : 0;
    };
    const ops::WindowAttrs& win = p.window;
    bool ok = !p.bf16 && x.dtype == DType::F32 && x.shape.size() == 4 && w.shape.size() == 4 &&
              y.shape.size() == 4 && p.group == 1 && win.kernel_shape.size() == 2 &&
              win.strides.size() == 2 && win.dilations.size() == 2 && win.pads.size() == 4;
    for (size_t i = 0; ok && i < 2; ++i)
      ok = win.kernel_shape[i] == 3 && win.strides[i] == 1 && win.dilations[i] == 1 &&
           win.pads[i] <= 1 && win.pads[i + 2] <= 1 && fixed(y, i + 2) >= 14;
    ok = ok && fixed(x, 1) >= 32 && fixed(x, 1) % 16 == 0 && fixed(w, 0) >= 32 &&
         fixed(w, 0) % 16 == 0;
    p.winograd = ok;
    marked += ok;
  }
  return marked;
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
    if (op == "BatchNormalization") set(s.in, 5, 1);  // the fused residual (params.h)
    set(s.out, 0, 1);
  } else if (op == "BatchNormalizationGrad" || op == "ReluGrad" || op == "ClipGrad") {
    set(s.in, 0, 1);
    set(s.in, 1, 1);
    // BatchNormalizationGrad's fused activation output (fuse_batch_norm_relu); ClipGrad's inputs
    // 2 and 3 are its scalar bounds: plain
    if (op == "BatchNormalizationGrad") set(s.in, 3, 1);
    set(s.out, 0, 1);
  } else if (op == "MaxPool" && (n.outputs.size() < 2 || n.outputs[1] == kNoValue)) {
    set(s.in, 0, 1);  // 2-D (a blockable value): X and Y blocked together; not with Indices
    set(s.out, 0, 1);
  } else if (op == "MaxPoolGrad") {
    set(s.in, 0, 1);
    set(s.in, 1, 1);
    set(s.out, 0, 1);
  } else if (op == "AveragePool") {
    set(s.in, 0, 1);
    set(s.out, 0, 1);
  } else if (op == "AveragePoolGrad") {
    set(s.in, 0, 1);  // input 1, X's shape, is an integer tensor: plain
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
