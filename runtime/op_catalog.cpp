#include "runtime/op_catalog.h"

#include <array>

namespace cb {

namespace {
constexpr std::array<const OpDef*, static_cast<size_t>(OpKind::Count)> kTable = {
#define CB_OP_PTR(n) &ops::k##n,
    CB_OPS(CB_OP_PTR)
#undef CB_OP_PTR
};
static_assert(kTable.size() == static_cast<size_t>(OpKind::Count));
}  // namespace

const OpDef& op_def(OpKind k) { return *kTable[static_cast<size_t>(k)]; }

const OpDef* find_op(std::string_view name) {
  for (const OpDef* d : kTable)
    if (d->name == name) return d;
  return nullptr;
}

std::span<const OpDef* const> all_ops() { return kTable; }

std::string attr_type_name(const AttrValue& v) {
  constexpr std::string_view kNames[] = {"int",    "float",   "string", "ints",
                                         "floats", "strings", "tensor", "opaque"};
  return std::string(kNames[v.index()]);
}

// ---- ParseCtx ---------------------------------------------------------------------------------

ParseCtx::ParseCtx(const Graph& g, NodeId n)
    : g_(g), id_(n), node_(g.nodes[static_cast<size_t>(n)]) {}

std::string ParseCtx::label() const { return g_.node_label(id_); }

const AttrValue* ParseCtx::get(const std::string& name) {
  read_.insert(name);
  auto it = node_.attrs.find(name);
  return it == node_.attrs.end() ? nullptr : &it->second;
}

namespace {
template <typename T>
const T* typed(const ParseCtx& c, const AttrValue* v, const std::string& name,
               std::string_view want) {
  if (!v) return nullptr;
  if (const T* t = std::get_if<T>(v)) return t;
  c.fail("attribute '{}' must be of type {}, got {}", name, want, attr_type_name(*v));
}
}  // namespace

std::optional<int64_t> ParseCtx::opt_i(const std::string& name) {
  if (const auto* v = typed<int64_t>(*this, get(name), name, "int")) return *v;
  return std::nullopt;
}
int64_t ParseCtx::i(const std::string& name, int64_t def) { return opt_i(name).value_or(def); }

std::optional<float> ParseCtx::opt_f(const std::string& name) {
  if (const auto* v = typed<float>(*this, get(name), name, "float")) return *v;
  return std::nullopt;
}
float ParseCtx::f(const std::string& name, float def) { return opt_f(name).value_or(def); }

std::string ParseCtx::s(const std::string& name, const std::string& def) {
  if (const auto* v = typed<std::string>(*this, get(name), name, "string")) return *v;
  return def;
}

std::optional<std::vector<int64_t>> ParseCtx::opt_ints(const std::string& name) {
  if (const auto* v = typed<std::vector<int64_t>>(*this, get(name), name, "ints")) return *v;
  return std::nullopt;
}
std::vector<int64_t> ParseCtx::ints(const std::string& name, std::vector<int64_t> def) {
  return opt_ints(name).value_or(std::move(def));
}

std::optional<std::vector<std::string>> ParseCtx::opt_strings(const std::string& name) {
  if (const auto* v = typed<std::vector<std::string>>(*this, get(name), name, "strings")) return *v;
  return std::nullopt;
}

TensorPtr ParseCtx::tensor(const std::string& name) {
  if (const auto* v = typed<TensorPtr>(*this, get(name), name, "tensor")) return *v;
  return nullptr;
}

void ParseCtx::only(const std::string& name, int64_t expected, std::string_view why) {
  auto v = opt_i(name);
  if (v && *v != expected) fail("{}={} is not supported: {}", name, *v, why);
}

void ParseCtx::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [name, v] : node_.attrs)
    if (!read_.count(name)) unknown.push_back(name);
  if (unknown.empty()) return;
  std::string list;
  for (const auto& u : unknown) list += (list.empty() ? "'" : ", '") + u + "'";
  fail("has attribute {} that {} at opset {} does not define; re-export without it", list,
       node_.op_type, g_.opset);
}

// ---- InferCtx ---------------------------------------------------------------------------------

const std::vector<Dim>* InferCtx::known(size_t i) const {
  if (!has_input(i)) return nullptr;
  const auto& k = in(i).known;
  return k ? &*k : nullptr;
}

std::vector<Dim> InferCtx::known_dims(size_t i, std::string_view what) const {
  if (!has_input(i)) fail("needs its {} input", what);
  if (const auto* k = known(i)) return *k;
  fail(
      "{} (input {} '{}') must be a constant or computable from shapes before execution; "
      "crossbow does not run data-dependent shapes. Re-export with the value fixed.",
      what, i, in(i).name);
}

std::vector<int64_t> InferCtx::known_ints(size_t i, std::string_view what) const {
  std::vector<int64_t> out;
  for (const Dim& d : known_dims(i, what)) {
    if (d.batch)
      fail("{} (input {} '{}') depends on the batch size, which is not supported here", what, i,
           in(i).name);
    out.push_back(d.value);
  }
  return out;
}

void InferCtx::set(size_t i, DType t, Shape s) {
  if (!has_output(i)) return;
  Value& v = g_.value(node().outputs[i]);
  for (const Dim& d : s)
    if (d.value < 0)
      fail("output {} '{}' would have a negative dimension: {}", i, v.name, to_string(s));
  v.dtype = t;
  v.shape = std::move(s);
  v.shape_known = true;
}

void InferCtx::set_known(size_t i, std::vector<Dim> k) {
  if (!has_output(i)) return;
  g_.value(node().outputs[i]).known = std::move(k);
}

void InferCtx::set_data(size_t i, TensorPtr t) {
  if (!has_output(i)) return;
  set(i, t->dtype, shape_of(t->dims));
  Value& v = g_.value(node().outputs[i]);
  v.known = known_from_tensor(*t);
  v.data = std::move(t);
}

void InferCtx::expect_rank(size_t i, int64_t r, std::string_view what) const {
  if (rank(i) != r)
    fail("{} (input {} '{}') must have rank {}, got shape {}", what, i, in(i).name, r,
         to_string(shape(i)));
}

void InferCtx::expect_min_rank(size_t i, int64_t r, std::string_view what) const {
  if (rank(i) < r)
    fail("{} (input {} '{}') must have rank >= {}, got shape {}", what, i, in(i).name, r,
         to_string(shape(i)));
}

void InferCtx::expect_float(size_t i, std::string_view what) const {
  if (!dtype_is_float(dtype(i)))
    fail("{} (input {} '{}') must be a floating point tensor, got {}", what, i, in(i).name,
         dtype_name(dtype(i)));
}

void InferCtx::expect_same_dtype(size_t a, size_t b) const {
  if (dtype(a) != dtype(b))
    fail("inputs {} '{}' ({}) and {} '{}' ({}) must have the same type", a, in(a).name,
         dtype_name(dtype(a)), b, in(b).name, dtype_name(dtype(b)));
}

int64_t InferCtx::axis(int64_t a, int64_t r, std::string_view what) const {
  auto n = normalize_axis(a, r);
  if (!n) fail("{} {} is out of range for rank {}", what, a, r);
  return *n;
}

// ---- driving a node ---------------------------------------------------------------------------

void parse_node(Graph& g, NodeId id) {
  Node& n = g.nodes[static_cast<size_t>(id)];
  CB_CHECK(n.def);
  const OpDef& d = *n.def;
  auto count = [](const std::vector<ValueId>& v) {
    size_t last = v.size();  // trailing omitted optionals do not count
    while (last > 0 && v[last - 1] == kNoValue) --last;
    return static_cast<int>(last);
  };
  int ni = count(n.inputs), no = count(n.outputs);
  auto range = [](int lo, int hi) {
    return hi < 0     ? fmt::format("at least {}", lo)
           : lo == hi ? std::to_string(lo)
                      : fmt::format("{} to {}", lo, hi);
  };
  if (ni < d.inputs_min || (d.inputs_max >= 0 && ni > d.inputs_max))
    fail("{} has {} inputs; {} takes {}", g.node_label(id), ni, d.name,
         range(d.inputs_min, d.inputs_max));
  if (no < d.outputs_min || (d.outputs_max >= 0 && no > d.outputs_max))
    fail("{} has {} outputs; {} gives {}", g.node_label(id), no, d.name,
         range(d.outputs_min, d.outputs_max));
  ParseCtx ctx(g, id);
  try {
    if (d.parse) n.params = d.parse(ctx);
  } catch (const LimitError& e) {
    fail("{} {}", g.node_label(id), e.what());
  }
  ctx.finish();
}

void infer_node(Graph& g, NodeId id) {
  Node& n = g.nodes[static_cast<size_t>(id)];
  CB_CHECK(n.def && n.def->infer);
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] != kNoValue && !g.value(n.inputs[i]).shape_known) return;  // lenient mode
  InferCtx ctx(g, id);
  try {
    n.def->infer(ctx);
  } catch (const LimitError& e) {
    fail("{} {}", g.node_label(id), e.what());
  }
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i] != kNoValue && !g.value(n.outputs[i]).shape_known)
      throw InternalError(fmt::format("{}: infer() left output {} unset", g.node_label(id), i));
}

}  // namespace cb
