#include "runtime/graph_builder.h"

#include "runtime/copy_bytes.h"
#include "runtime/error.h"
#include "runtime/op_catalog.h"

namespace cb {

std::string GraphBuilder::fresh_name(std::string_view op) {
  return fmt::format("{}/{}_{}", prefix_, op, counter_++);
}

std::vector<ValueId> GraphBuilder::emit(std::string_view op, std::vector<ValueId> inputs,
                                        AttrMap attrs, size_t outputs) {
  return emit_node(op, std::move(inputs), std::move(attrs), {}, outputs);
}

std::vector<ValueId> GraphBuilder::emit_with(std::string_view op, std::vector<ValueId> inputs,
                                             std::any params, size_t outputs) {
  return emit_node(op, std::move(inputs), {}, std::move(params), outputs);
}

std::vector<ValueId> GraphBuilder::emit_node(std::string_view op, std::vector<ValueId> inputs,
                                             AttrMap attrs, std::any params, size_t outputs) {
  const OpDef* def = find_op(op);
  if (!def) throw InternalError(fmt::format("GraphBuilder: op '{}' is not in the catalog", op));
  Node n;
  n.name = fresh_name(op);
  n.op_type = std::string(op);
  n.def = def;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.params = std::move(params);
  n.opset = kEmitOpset;
  auto id = static_cast<NodeId>(g_.nodes.size());
  for (size_t i = 0; i < outputs; ++i) {
    Value v;
    v.name = fmt::format("{}:{}", n.name, i);
    v.producer = id;
    n.outputs.push_back(g_.add_value(std::move(v)));
  }
  std::vector<ValueId> out = n.outputs;
  g_.nodes.push_back(std::move(n));
  try {
    if (!g_.nodes.back().params.has_value()) parse_node(g_, id);
    infer_node(g_, id);
  } catch (const Error& e) {
    // An emitted node that does not check is our bug, not the user's input.
    throw InternalError(fmt::format("emitting {}: {}", op, e.what()));
  }
  return out;
}

void GraphBuilder::omit(ValueId v) {
  Node& n = g_.nodes.at(static_cast<size_t>(g_.value(v).producer));
  for (ValueId& o : n.outputs)
    if (o == v) o = kNoValue;
  g_.value(v).producer = -1;
}

ValueId GraphBuilder::constant(Tensor t, std::string_view hint) {
  Value v;
  v.name = fresh_name(hint);
  v.kind = ValueKind::Constant;
  v.dtype = t.dtype;
  v.shape = cb::shape_of(t.dims);
  v.shape_known = true;
  v.known = known_from_tensor(t);
  v.data = std::make_shared<Tensor>(std::move(t));
  return g_.add_value(std::move(v));
}

ValueId GraphBuilder::scalar(double x, DType t) {
  Tensor s;
  s.dtype = t;
  s.bytes.resize(dtype_size(t));
  switch (t) {
    case DType::F32:
      *s.data<float>() = static_cast<float>(x);
      break;
    case DType::F64:
      *s.data<double>() = x;
      break;
    case DType::I64:
      *s.data<int64_t>() = static_cast<int64_t>(x);
      break;
    case DType::I32:
      *s.data<int32_t>() = static_cast<int32_t>(x);
      break;
    default:
      throw InternalError("GraphBuilder::scalar of " + std::string(dtype_name(t)));
  }
  return constant(std::move(s), "scalar");
}

ValueId GraphBuilder::ints(const std::vector<int64_t>& v) {
  Tensor t;
  t.dtype = DType::I64;
  t.dims = {static_cast<int64_t>(v.size())};
  t.bytes.resize(v.size() * 8);
  copy_bytes(t.bytes.data(), v.data(), v.size() * 8);
  return constant(std::move(t), "ints");
}

ValueId GraphBuilder::shape_of(const Shape& s) {
  if (shape_is_static(s)) {
    std::vector<int64_t> d;
    for (const Dim& x : s) d.push_back(x.value);
    return ints(d);
  }
  Value v;
  v.name = fresh_name("shape");
  v.kind = ValueKind::Constant;
  v.dtype = DType::I64;
  v.shape = {Dim::of(static_cast<int64_t>(s.size()))};
  v.shape_known = true;
  v.known = s;
  return g_.add_value(std::move(v));
}

ValueId GraphBuilder::input(std::string name, DType t, Shape s) {
  Value v;
  v.name = std::move(name);
  v.kind = ValueKind::Input;
  v.dtype = t;
  v.shape = std::move(s);
  v.shape_known = true;
  ValueId id = g_.add_value(std::move(v));
  g_.inputs.push_back(id);
  return id;
}

ValueId GraphBuilder::sum_to(ValueId g, Shape target) {
  if (value(g).shape == target) return g;
  return op("ReduceSumTo", {g, shape_of(target)});
}

ValueId GraphBuilder::reshape_to(ValueId g, Shape target) {
  if (value(g).shape == target) return g;
  return op("Reshape", {g, shape_of(target)});
}

}  // namespace cb
