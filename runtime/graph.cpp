#include "runtime/graph.h"

#include <fmt/format.h>


namespace cb {

std::string_view value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input:
      return "input";
    case ValueKind::Parameter:
      return "parameter";
    case ValueKind::State:
      return "state";
    case ValueKind::Constant:
      return "constant";
    case ValueKind::Activation:
      return "activation";
  }
  return "?";
}

ValueId Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<ValueId>(values.size() - 1);
}

std::optional<ValueId> Graph::find_value(std::string_view n) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == n) return static_cast<ValueId>(i);
  return std::nullopt;
}

std::vector<std::vector<NodeId>> Graph::consumers() const {
  std::vector<std::vector<NodeId>> out(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (ValueId v : nodes[n].inputs)
      if (v != kNoValue) out[static_cast<size_t>(v)].push_back(static_cast<NodeId>(n));
  return out;
}

std::string Graph::node_label(NodeId n) const {
  const Node& node = nodes.at(static_cast<size_t>(n));
  return fmt::format("[{} node '{}']", node.op_type, node.name);
}

std::optional<std::vector<Dim>> known_from_tensor(const Tensor& t) {
  if (!(dtype_is_int(t.dtype) || t.dtype == DType::Bool) || t.numel() > kKnownMaxElems)
    return std::nullopt;
  std::vector<Dim> k;
  k.reserve(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) k.push_back(Dim::of(t.int_at(i)));
  return k;
}

ParamStats param_stats(const Graph& g) {
  ParamStats s;
  for (const Value& v : g.values) {
    if (!v.data) continue;
    if (v.kind == ValueKind::Parameter) {
      s.count += v.data->numel();
      s.bytes += static_cast<int64_t>(v.data->bytes.size());
      s.tensors += 1;
      s.constant_node_tensors += v.constant_node ? 1 : 0;
    } else if (v.kind == ValueKind::State) {
      s.state_count += v.data->numel();
    }
  }
  return s;
}

}  // namespace cb
