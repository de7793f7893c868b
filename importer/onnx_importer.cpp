#include "importer/onnx_importer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "importer/tensor_proto.h"
#include "importer/why_unparsable.h"
#include "runtime/error.h"
#include "runtime/op_catalog.h"
#include "runtime/passes.h"
#include "runtime/small_vec.h"

namespace cb {

namespace fs = std::filesystem;

namespace {

// No value can be larger than this (as in tensor_proto.cpp): anything above is a broken file,
// and the limit keeps all shape arithmetic far from int64 overflow.
constexpr int64_t kMaxValueBytes = int64_t{1} << 40;

// The If branches a node sits in: (condition, true for the then branch), outermost first.
using Guards = std::vector<std::pair<ValueId, bool>>;

class Importer {
 public:
  Importer(const onnx::ModelProto& m, std::string file, std::string dir, const ImportOptions& o)
      : m_(m), file_(std::move(file)), dir_(std::move(dir)), opts_(o) {}

  ImportResult run() {
    check_header();
    const onnx::GraphProto& gp = m_.graph();
    res_.graph.name = gp.name();
    res_.graph.producer = m_.producer_name();
    res_.graph.ir_version = m_.ir_version();
    res_.graph.opset = opset_;
    read_initializers(gp, "");
    read_inputs(gp);
    res_.nodes_in_file = gp.node_size();
    read_nodes(gp, "", {});
    bind_input_values();
    read_outputs(gp);
    check_blockers();
    if (res_.rebatched_from) {
      try {
        infer_all();
      } catch (const Error& e) {
        bad("the model was exported with a fixed batch of {} and cannot be re-batched: its graph "
            "fixes the batch elsewhere:\n  {}\nre-export it with a dynamic batch axis (PyTorch: "
            "dynamic_axes={{'input': {{0: 'batch'}}}})",
            res_.rebatched_from, e.what());
      }
      check_rebatched_outputs(gp);
    } else {
      infer_all();
    }
    drop_untaken_branches();
    try {
      lower_composites(res_.graph);
    } catch (const Error& e) {
      bad("{}", e.what());
    }
    if (opts_.fold) {
      auto st = fold_and_prune(res_.graph);
      res_.nodes_folded = st.folded;
      res_.nodes_dead = st.dead;
      // Fused ops for what exporters spell out; the nodes they replace go.
      if (fuse_gelu(res_.graph) + fuse_attention_softmax(res_.graph) > 0)
        fold_and_prune(res_.graph);
    }
    classify_initializers(res_.graph);
    return std::move(res_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(file_ + ": " + fmt::format(f, std::forward<Args>(args)...));
  }

  void check_header() {
    if (m_.ir_version() == 0 && m_.opset_import_size() == 0 && !m_.has_graph())
      bad("not an ONNX model: no IR version, opset or graph (is this the right file?)");
    bool found = false;
    for (const auto& o : m_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        found = true;
        opset_ = o.version();
      }
    }
    if (m_.ir_version() < kMinIrVersion || m_.ir_version() > kMaxIrVersion)
      bad("IR version {}{} is not supported (crossbow reads IR versions {} to {}, opsets {} to "
          "{}); re-export with opset_version between {} and {}",
          m_.ir_version(), found ? fmt::format(" (default-domain opset {})", opset_) : "",
          kMinIrVersion, kMaxIrVersion, kMinOpset, kMaxOpset, kMinOpset, kMaxOpset);
    if (!m_.has_graph()) bad("the model has no graph");
    if (!found) bad("the model imports no default-domain ('ai.onnx') opset");
    if (opset_ < kMinOpset || opset_ > kMaxOpset)
      bad("default-domain opset {} is {}: crossbow reads opsets {} to {}; re-export with "
          "opset_version in that range",
          opset_, opset_ > kMaxOpset ? "too new" : "too old", kMinOpset, kMaxOpset);
  }

  // Defines `name` in the innermost scope; its IR name is `prefix` + name (a subgraph's values are
  // prefixed with their If node's name and branch, so that inlined branches do not collide).
  ValueId define(const std::string& name, std::string_view what, const std::string& prefix = "") {
    if (name.empty()) bad("{} has an empty name", what);
    auto [it, fresh] = scopes_.back().emplace(name, kNoValue);
    if (!fresh)
      bad("the name '{}' is defined twice ({} and {}); every value name must be unique", name,
          defined_as_[prefix + name], what);
    defined_as_[prefix + name] = std::string(what);
    Value v;
    v.name = prefix + name;
    it->second = res_.graph.add_value(std::move(v));
    return it->second;
  }

  // A name as seen from the innermost scope (a subgraph reads its outer graphs' values).
  std::optional<ValueId> lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return it->second;
    return std::nullopt;
  }

  void read_initializers(const onnx::GraphProto& gp, const std::string& prefix) {
    for (const auto& t : gp.initializer()) {
      std::string what = fmt::format("initializer '{}{}'", prefix, t.name());
      ValueId id = define(t.name(), what, prefix);
      set_constant(id, tensor_from_proto(t, file_ + ": " + what, dir_), ValueKind::Constant);
      // An If branch's initializers are the branch's constants, never trained.
      res_.graph.value(id).initializer = prefix.empty();
      check_rank(res_.graph.value(id).shape, what);
    }
    if (gp.sparse_initializer_size() > 0)
      bad("sparse initializers are not supported ('{}')", gp.sparse_initializer(0).values().name());
  }

  void set_constant(ValueId id, TensorPtr t, ValueKind kind) {
    Value& v = res_.graph.value(id);
    v.kind = kind;
    v.dtype = t->dtype;
    v.shape = shape_of(t->dims);
    v.shape_known = true;
    v.known = known_from_tensor(*t);
    v.data = std::move(t);
  }

  void read_inputs(const onnx::GraphProto& gp) {
    // The batch: the name of a symbolic axis 0 of any input (every dim of that name is N).
    for (const auto& in : gp.input()) {
      if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) continue;
      const auto& sh = in.type().tensor_type().shape();
      if (sh.dim_size() > 0 && sh.dim(0).has_dim_param() && !sh.dim(0).dim_param().empty())
        batch_names_.insert(sh.dim(0).dim_param());
    }
    for (const auto& in : gp.input()) {
      auto it = scopes_.back().find(in.name());
      if (it != scopes_.back().end() && res_.graph.value(it->second).data)
        continue;  // initializer (IR<4)
      ValueId id = define(in.name(), fmt::format("graph input '{}'", in.name()));
      Value& v = res_.graph.value(id);
      v.kind = ValueKind::Input;
      if (auto c = opts_.constant_inputs.find(in.name()); c != opts_.constant_inputs.end()) {
        set_constant(id, c->second, ValueKind::Constant);
        continue;
      }
      read_type(in, v);
      res_.graph.inputs.push_back(id);
    }
    for (const auto& [name, shape] : opts_.input_shapes)
      if (!scopes_[0].count(name) || res_.graph.value(scopes_[0].at(name)).kind != ValueKind::Input)
        bad("a shape is given for '{}', which is not a graph input (inputs: {})", name,
            input_names(gp));
    for (const auto& [name, t] : opts_.input_values)
      if (!scopes_[0].count(name) || res_.graph.value(scopes_[0].at(name)).kind != ValueKind::Input)
        bad("a value is given for '{}', which is not a graph input (inputs: {})", name,
            input_names(gp));
  }

  std::string input_names(const onnx::GraphProto& gp) const {
    std::string out;
    for (const auto& in : gp.input())
      if (!res_.graph.value(scopes_[0].at(in.name())).data)
        out += (out.empty() ? "" : ", ") + in.name();
    return out;
  }

  // The concrete size of a symbolic (non-batch) dimension, or a clear error.
  int64_t concrete_size(const std::string& input, size_t axis, size_t rank,
                        const std::string& param) {
    const std::string key = param.empty() ? fmt::format("{}:{}", input, axis) : param;
    std::optional<int64_t> size;
    std::string from;
    if (auto d = opts_.dims.find(param); !param.empty() && d != opts_.dims.end()) {
      size = d->second;
      from = fmt::format("--dim {}={}", param, d->second);
    } else if (auto s = opts_.input_shapes.find(input);
               s != opts_.input_shapes.end() && axis < s->second.size()) {
      size = s->second[axis];
      from = fmt::format("the shape given for '{}'", input);
    } else if (auto t = opts_.input_values.find(input);
               t != opts_.input_values.end() && axis < t->second->dims.size()) {
      size = t->second->dims[axis];
      from = fmt::format("the data given for '{}'", input);
    } else if (opts_.size_of) {
      size = opts_.size_of(input, axis, rank);
      from = "the data";
    }
    std::string what = fmt::format("graph input '{}' has a symbolic dimension{} at axis {}", input,
                                   param.empty() ? "" : fmt::format(" '{}'", param), axis);
    if (!size)
      bad("{}: give its size{}", what,
          opts_.sizes_hint.empty() ? " in ImportOptions::dims or input_shapes"
                                   : " " + opts_.sizes_hint);
    if (*size <= 0) bad("{}: its size from {} is {}; sizes must be positive", what, from, *size);
    auto [it, fresh] = res_.sizes_bound.emplace(key, *size);
    if (!fresh && it->second != *size)
      bad("{}: {} gives it size {}, but it is {} elsewhere in the model (the same name means the "
          "same size)",
          what, from, *size, it->second);
    return *size;
  }

  void read_type(const onnx::ValueInfoProto& vi, Value& v) {
    std::string what = fmt::format("graph input '{}'", vi.name());
    if (!vi.type().has_tensor_type())
      bad("{} is not a tensor (sequences, maps and optionals are not supported)", what);
    const auto& tt = vi.type().tensor_type();
    auto dt = dtype_from_onnx(tt.elem_type());
    if (!dt)
      bad("{} has element type {}, which crossbow does not support", what,
          onnx_dtype_name(tt.elem_type()));
    v.dtype = *dt;
    if (!tt.has_shape())
      bad("{} has no shape; re-export with input shapes (dynamic_axes only for the batch)", what);
    const size_t rank = static_cast<size_t>(tt.shape().dim_size());
    // A shape given for the input (or its data's) must match what the file declares.
    const std::vector<int64_t>* given = nullptr;
    std::string given_from;
    if (auto s = opts_.input_shapes.find(vi.name()); s != opts_.input_shapes.end()) {
      given = &s->second;
      given_from = "the shape given";
    } else if (auto t = opts_.input_values.find(vi.name()); t != opts_.input_values.end()) {
      given = &t->second->dims;
      given_from = "the data given";
      if (t->second->dtype != v.dtype)
        bad("{} is {} but the data given for it is {}", what, dtype_name(v.dtype),
            dtype_name(t->second->dtype));
    }
    if (given && given->size() != rank)
      bad("{} has rank {} ({}) but {} for it has rank {} ({})", what, rank,
          declared_text(tt.shape()), given_from, given->size(), to_string(shape_of(*given)));
    for (size_t i = 0; i < rank; ++i) {
      const auto& d = tt.shape().dim(static_cast<int>(i));
      if (d.has_dim_value()) {
        if (d.dim_value() < 0)
          bad("{} has a negative dimension {} at axis {}", what, d.dim_value(), i);
        if (opts_.rebatch && i == 0) {
          if (res_.rebatched_from && res_.rebatched_from != d.dim_value())
            bad("{} has a fixed batch of {} but another input has {}: the inputs disagree on "
                "the batch, so it cannot be re-batched",
                what, d.dim_value(), res_.rebatched_from);
          res_.rebatched_from = d.dim_value();
          v.shape.push_back(Dim::N());
          continue;
        }
        if (given && (*given)[i] != d.dim_value())
          bad("{} has shape {} but {} for it has shape {}: axis {} must be {}", what,
              declared_text(tt.shape()), given_from, to_string(shape_of(*given)), i, d.dim_value());
        v.shape.push_back(Dim::of(d.dim_value()));
      } else if (i == 0 || (d.has_dim_param() && batch_names_.count(d.dim_param()))) {
        v.shape.push_back(Dim::N());
      } else {
        v.shape.push_back(Dim::of(concrete_size(vi.name(), i, rank, d.dim_param())));
      }
    }
    check_rank(v.shape, what);
    if (auto why = too_large(v.shape, v.dtype))
      bad("{} has shape {}: {}; the file is corrupt or the dims are wrong", what,
          to_string(v.shape), *why);
    v.shape_known = true;
  }

  static std::string declared_text(const onnx::TensorShapeProto& s) {
    std::string out = "[";
    for (int i = 0; i < s.dim_size(); ++i) {
      if (i) out += ",";
      out += s.dim(i).has_dim_value()       ? std::to_string(s.dim(i).dim_value())
             : s.dim(i).dim_param().empty() ? "?"
                                            : s.dim(i).dim_param();
    }
    return out + "]";
  }

  // Inputs given values (ImportOptions::input_values) whose values decide shapes or an If's
  // branch become constants: walk back from every value input (and If condition) to the graph
  // inputs it depends on.
  void bind_input_values() {
    if (opts_.input_values.empty()) return;
    Graph& g = res_.graph;
    std::vector<ValueId> stack;
    for (const Node& n : g.nodes) {
      uint32_t bits = n.def ? n.def->value_inputs : 0;
      if (n.op_type == "If" && n.domain.empty()) bits |= 1u;
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (((bits >> i) & 1u) && n.inputs[i] != kNoValue) stack.push_back(n.inputs[i]);
    }
    std::set<ValueId> seen;
    while (!stack.empty()) {
      ValueId v = stack.back();
      stack.pop_back();
      if (!seen.insert(v).second) continue;
      const Value& val = g.value(v);
      if (val.producer >= 0)
        for (ValueId in : g.nodes[static_cast<size_t>(val.producer)].inputs)
          if (in != kNoValue) stack.push_back(in);
    }
    std::vector<ValueId> kept;
    for (ValueId in : g.inputs) {
      auto t = opts_.input_values.find(g.value(in).name);
      if (seen.count(in) && t != opts_.input_values.end()) {
        set_constant(in, t->second, ValueKind::Constant);
        res_.inputs_bound.push_back(g.value(in).name);
      } else {
        kept.push_back(in);
      }
    }
    g.inputs = std::move(kept);
  }

  // Kernels index tensors of rank up to kMaxRank.
  void check_rank(const Shape& s, const std::string& what) {
    if (s.size() > kMaxRank)
      bad("{} has rank {}; crossbow supports tensors of rank up to {}", what, s.size(), kMaxRank);
  }

  // Why a value of this shape cannot exist (per sample, for shapes in terms of N), if it cannot.
  static std::optional<std::string> too_large(const Shape& s, DType t) {
    int64_t bytes = static_cast<int64_t>(dtype_size(t));
    for (const Dim& d : s) {
      if (d.value < 0) return fmt::format("dimension {} is negative", to_string(d));
      if (d.value > kMaxValueBytes || (d.value != 0 && bytes > kMaxValueBytes / d.value))
        return fmt::format("its dims overflow (more than 1 TiB{})",
                           shape_is_static(s) ? "" : " per sample");
      bytes *= d.value;
    }
    return std::nullopt;
  }

  static AttrValue convert_attr(const onnx::AttributeProto& a, const std::string& what,
                                const std::string& dir) {
    using A = onnx::AttributeProto;
    switch (a.type()) {
      case A::INT:
        return a.i();
      case A::FLOAT:
        return a.f();
      case A::STRING:
        return a.s();
      case A::INTS:
        return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case A::FLOATS:
        return std::vector<float>(a.floats().begin(), a.floats().end());
      case A::STRINGS:
        return std::vector<std::string>(a.strings().begin(), a.strings().end());
      case A::TENSOR:
        return tensor_from_proto(a.t(), fmt::format("{} attribute '{}'", what, a.name()), dir);
      default:
        return OpaqueAttr{A::AttributeType_Name(a.type())};
    }
  }

  // Reads `gp`'s nodes into the graph; `prefix` names a subgraph's nodes and values, `guards`
  // are the (cond, branch) pairs of the If branches the nodes sit in.
  void read_nodes(const onnx::GraphProto& gp, const std::string& prefix, const Guards& guards) {
    Graph& g = res_.graph;
    // Producers, for the "used before produced" and cycle diagnostics.
    std::unordered_map<std::string, int> produced_by;
    for (int n = 0; n < gp.node_size(); ++n)
      for (const auto& o : gp.node(n).output())
        if (!o.empty()) produced_by.emplace(o, n);
    for (int n = 0; n < gp.node_size(); ++n) {
      const auto& np = gp.node(n);
      Node node;
      node.name = prefix + (np.name().empty() ? fmt::format("{}_{}", np.op_type(), n) : np.name());
      if (!node_names_.insert(node.name).second) node.name += fmt::format("#{}", n);
      node.op_type = np.op_type();
      node.domain = np.domain() == "ai.onnx" ? "" : np.domain();
      std::string label = fmt::format("[{} node '{}']", node.op_type, node.name);
      for (const auto& in : np.input()) {
        if (in.empty()) {
          node.inputs.push_back(kNoValue);
          continue;
        }
        auto id = lookup(in);
        if (!id) {
          auto p = produced_by.find(in);
          if (p == produced_by.end())
            bad("{} reads '{}', which no node, graph input or initializer produces", label, in);
          if (p->second == n || on_cycle(gp, p->second, n, produced_by))
            bad("{} is on a cycle: it reads '{}', which depends on its own output; a graph "
                "must be acyclic",
                label, in);
          bad("{} reads '{}' before it is produced (by node '{}', later in the file); ONNX "
              "requires nodes in topological order",
              label, in, gp.node(p->second).name());
        }
        node.inputs.push_back(*id);
      }
      for (const auto& a : np.attribute()) {
        if (node.attrs.count(a.name())) bad("{} has attribute '{}' twice", label, a.name());
        node.attrs[a.name()] = convert_attr(a, file_ + ": " + label, dir_);
      }
      if (node.op_type == "If" && node.domain.empty()) inline_if(np, node, label, guards);
      for (const auto& out : np.output()) {
        if (out.empty()) {
          node.outputs.push_back(kNoValue);
          continue;
        }
        ValueId v = define(out, fmt::format("output of node '{}'", node.name), prefix);
        g.value(v).producer = static_cast<NodeId>(g.nodes.size());
        node.outputs.push_back(v);
      }
      if (prefix.empty() && node.domain.empty() && node.op_type == "Constant")
        for (ValueId o : node.outputs)
          if (o != kNoValue) g.value(o).constant_node = true;
      if (node.domain.empty()) node.def = find_op(node.op_type);
      if (node.def && node.def->internal) node.def = nullptr;  // ours, not ONNX
      g.nodes.push_back(std::move(node));
      guards_.push_back(guards);
    }
  }

  // If: both branches' nodes go into the graph ahead of the If node, which then takes cond and
  // the branches' outputs as inputs (runtime/ops/if.cpp selects). A branch's own names live in
  // a scope of their own and are prefixed '<if node>/then/' or '/else/'.
  void inline_if(const onnx::NodeProto& np, Node& node, const std::string& label,
                 const Guards& guards) {
    if (node.inputs.size() != 1 || node.inputs[0] == kNoValue)
      bad("{} has {} inputs; If takes one, the condition", label, np.input_size());
    std::vector<ValueId> outs[2];
    const char* names[2] = {"then_branch", "else_branch"};
    for (int b = 0; b < 2; ++b) {
      const onnx::AttributeProto* attr = nullptr;
      for (const auto& a : np.attribute())
        if (a.name() == names[b]) attr = &a;
      if (!attr || attr->type() != onnx::AttributeProto::GRAPH)
        bad("{} needs a graph attribute '{}'", label, names[b]);
      node.attrs.erase(names[b]);
      const onnx::GraphProto& sub = attr->g();
      if (sub.input_size() > 0)
        bad("{} {} has {} inputs; an If branch takes none (it reads outer values by name)", label,
            names[b], sub.input_size());
      if (sub.output_size() != np.output_size())
        bad("{} {} has {} outputs, the node {}", label, names[b], sub.output_size(),
            np.output_size());
      std::string prefix = node.name + (b == 0 ? "/then/" : "/else/");
      Guards inner = guards;
      inner.push_back({node.inputs[0], b == 0});
      scopes_.emplace_back();
      read_initializers(sub, prefix);
      if (sub.sparse_initializer_size() > 0)
        bad("{} {}: sparse initializers are not supported", label, names[b]);
      res_.nodes_in_file += sub.node_size();
      read_nodes(sub, prefix, inner);
      for (const auto& o : sub.output()) {
        auto id = lookup(o.name());
        if (!id)
          bad("{} {} output '{}' is not produced in the branch or outside", label, names[b],
              o.name());
        outs[b].push_back(*id);
      }
      scopes_.pop_back();
    }
    for (int b = 0; b < 2; ++b)
      node.inputs.insert(node.inputs.end(), outs[b].begin(), outs[b].end());
  }

  // Nodes of If branches ruled out by a condition known at import were never inferred (and
  // nothing reads them anymore: infer_all cut the If nodes' inputs from them); they go.
  void drop_untaken_branches() {
    Graph& g = res_.graph;
    if (std::none_of(skipped_.begin(), skipped_.end(), [](bool b) { return b; })) return;
    std::vector<Node> nodes;
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (!skipped_[n]) {
        nodes.push_back(std::move(g.nodes[n]));
        continue;
      }
      for (ValueId o : g.nodes[n].outputs)
        if (o != kNoValue) g.value(o).producer = -1;
    }
    g.nodes = std::move(nodes);
    for (size_t n = 0; n < g.nodes.size(); ++n)
      for (ValueId o : g.nodes[n].outputs)
        if (o != kNoValue) g.value(o).producer = static_cast<NodeId>(n);
  }

  // Is node `n` in an If branch that a condition known by now rules out?
  bool ruled_out(size_t n) const {
    for (const auto& [cond, then] : guards_[n]) {
      const auto& k = res_.graph.value(cond).known;
      if (k && k->size() == 1 && !(*k)[0].batch && ((*k)[0].value != 0) != then) return true;
    }
    return false;
  }

  // Does node `from` (transitively) read an output of node `to`? Then `to` reading `from`'s
  // output closes a cycle.
  static bool on_cycle(const onnx::GraphProto& gp, int from, int to,
                       const std::unordered_map<std::string, int>& produced_by) {
    std::vector<int> stack{from};
    std::set<int> seen;
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      if (n == to) return true;
      if (!seen.insert(n).second) continue;
      for (const auto& in : gp.node(n).input()) {
        auto p = produced_by.find(in);
        if (p != produced_by.end()) stack.push_back(p->second);
      }
    }
    return false;
  }

  void read_outputs(const onnx::GraphProto& gp) {
    if (gp.output_size() == 0) bad("the graph has no outputs");
    for (const auto& o : gp.output()) {
      auto id = lookup(o.name());
      if (!id) bad("graph output '{}' is not produced by any node, input or initializer", o.name());
      res_.graph.outputs.push_back(*id);
    }
  }

  void check_blockers() {
    const Graph& g = res_.graph;
    for (const Node& n : g.nodes) {
      if (n.def) continue;
      std::string reason =
          !n.domain.empty()
              ? fmt::format("op domain '{}' is not supported (only the default ONNX domain)",
                            n.domain)
              : fmt::format("op '{}' is not in crossbow's op catalog", n.op_type);
      res_.blockers.push_back({n.name, n.op_type, reason});
    }
    if (res_.blockers.empty() || opts_.lenient) return;
    std::string list;
    for (const auto& b : res_.blockers)
      list += fmt::format("\n  node '{}' ({}): {}", b.node, b.op_type, b.reason);
    bad("{} node{} use ops crossbow does not support:{}\nRun `cb-inspect` on the model for the "
        "full report; re-export without these ops or file an issue naming them.",
        res_.blockers.size(), res_.blockers.size() == 1 ? "" : "s", list);
  }

  // After re-batching, an output the file declares with the fixed batch must now have N there:
  // otherwise the graph reshaped the batch away (e.g. Reshape to [1, -1]) and training on it
  // would be silently wrong.
  void check_rebatched_outputs(const onnx::GraphProto& gp) {
    for (int i = 0; i < gp.output_size(); ++i) {
      const auto& o = gp.output(i);
      if (!o.type().has_tensor_type() || !o.type().tensor_type().has_shape()) continue;
      const auto& sh = o.type().tensor_type().shape();
      if (sh.dim_size() == 0 || !sh.dim(0).has_dim_value() ||
          sh.dim(0).dim_value() != res_.rebatched_from)
        continue;
      const Value& v = res_.graph.value(res_.graph.outputs.at(static_cast<size_t>(i)));
      if (v.shape_known && (v.shape.empty() || v.shape[0] != Dim::N()))
        bad("the model was exported with a fixed batch of {} and cannot be re-batched: output "
            "'{}' is declared {} but comes out {} with the batch as N (the graph moves the batch "
            "out of the leading dimension); re-export it with a dynamic batch axis",
            res_.rebatched_from, o.name(), declared_text(sh), to_string(v.shape));
    }
  }

  void infer_all() {
    Graph& g = res_.graph;
    skipped_.assign(g.nodes.size(), false);
    std::vector<bool> gone(g.values.size(), false);  // outputs of ruled-out nodes
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (ruled_out(n)) {
        skipped_[n] = true;
        for (ValueId o : g.nodes[n].outputs)
          if (o != kNoValue) gone[static_cast<size_t>(o)] = true;
        continue;
      }
      // Only an If reads a ruled-out branch's outputs, and it does not need them.
      for (ValueId& in : g.nodes[n].inputs)
        if (in != kNoValue && gone[static_cast<size_t>(in)]) in = kNoValue;
      if (!g.nodes[n].def) continue;
      try {
        parse_node(g, static_cast<NodeId>(n));
        infer_node(g, static_cast<NodeId>(n));
      } catch (const Error& e) {
        bad("{}", e.what());
      }
      // Catch absurd shapes at the node that makes them, before anything multiplies them out.
      for (ValueId o : g.nodes[n].outputs) {
        if (o == kNoValue || !g.value(o).shape_known) continue;
        const Value& v = g.value(o);
        check_rank(v.shape,
                   fmt::format("{} output '{}'", g.node_label(static_cast<NodeId>(n)), v.name));
        if (auto why = too_large(v.shape, v.dtype))
          bad("{} output '{}' would have shape {}: {}", g.node_label(static_cast<NodeId>(n)),
              v.name, to_string(v.shape), *why);
      }
    }
  }

  const onnx::ModelProto& m_;
  std::string file_, dir_;
  const ImportOptions& opts_;
  int64_t opset_ = 0;
  ImportResult res_;
  // Value names by scope: the main graph's, then one per If branch being read.
  std::vector<std::unordered_map<std::string, ValueId>> scopes_{1};
  std::unordered_map<std::string, std::string> defined_as_;
  std::set<std::string> batch_names_;
  std::set<std::string> node_names_;
  std::vector<Guards> guards_;  // per node
  std::vector<bool> skipped_;   // per node: in a ruled-out branch
};

}  // namespace

ImportResult import_model_bytes(const std::string& bytes, const std::string& name,
                                const std::string& dir, const ImportOptions& opts) {
  onnx::ModelProto m;
  if (bytes.empty()) fail("{}: the file is empty; expected an ONNX model", name);
  if (!m.ParseFromString(bytes)) fail("{}: {}", name, why_unparsable(bytes));
  return Importer(m, name, dir, opts).run();
}

}  // namespace cb
