#include "tools/inspect_report.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <map>

#include "runtime/op_catalog.h"

namespace cb::tools {

namespace {

std::string type_str(const Value& v) {
  if (!v.shape_known) return "?";
  return fmt::format("{}{}", dtype_name(v.dtype), to_string(v.shape));
}

int64_t node_params(const Graph& g, const Node& n) {
  int64_t p = 0;
  for (ValueId i : n.inputs)
    if (i != kNoValue && g.value(i).kind == ValueKind::Parameter) p += g.value(i).data->numel();
  return p;
}

std::map<std::string, int> histogram(const Graph& g) {
  std::map<std::string, int> h;
  for (const Node& n : g.nodes) ++h[n.op_type];
  return h;
}

std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024 && u < 3) x /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", x, units[u]);
}

std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          o += fmt::format("\\u{:04x}", c);
        else
          o += c;
    }
  }
  return o + "\"";
}

std::string json_value(const Value& v) {
  std::string shape = "null";
  if (v.shape_known) {
    shape = "[";
    for (size_t i = 0; i < v.shape.size(); ++i)
      shape += (i ? "," : "") + (v.shape[i].batch ? json_str(to_string(v.shape[i]))
                                                  : std::to_string(v.shape[i].value));
    shape += "]";
  }
  return fmt::format("{{\"name\":{},\"dtype\":{},\"shape\":{}}}", json_str(v.name),
                     json_str(v.shape_known ? dtype_name(v.dtype) : "?"), shape);
}

}  // namespace

void print_text(std::ostream& os, const std::string& file, const ImportResult& r) {
  const Graph& g = r.graph;
  ParamStats ps = param_stats(g);
  fmt::print(os, "model     {}\n", file);
  fmt::print(os, "producer  {}  (IR version {}, opset {})\n", g.producer.empty() ? "?" : g.producer,
             g.ir_version, g.opset);
  fmt::print(os, "nodes     {} ({} in the file; {} constant/shape nodes folded, {} dead removed)\n",
             g.nodes.size(), r.nodes_in_file, r.nodes_folded, r.nodes_dead);
  fmt::print(os, "\ninputs\n");
  for (ValueId i : g.inputs) fmt::print(os, "  {:<24} {}\n", g.value(i).name, type_str(g.value(i)));
  fmt::print(os, "outputs\n");
  for (ValueId o : g.outputs)
    fmt::print(os, "  {:<24} {}\n", g.value(o).name, type_str(g.value(o)));
  fmt::print(os, "\nparameters  {} in {} tensors, {}{}\n", ps.count, ps.tensors,
             human_bytes(ps.bytes),
             ps.constant_node_tensors
                 ? fmt::format(" ({} of the tensors are weights the file stores as Constant "
                               "nodes: trained like initializers, written back to them)",
                               ps.constant_node_tensors)
                 : "");
  if (ps.state_count)
    fmt::print(os, "state       {} (BatchNorm running statistics)\n", ps.state_count);
  fmt::print(os, "\nops\n");
  for (const auto& [op, n] : histogram(g)) fmt::print(os, "  {:<24} {}\n", op, n);
  fmt::print(os, "\n{:<36} {:<20} {:<40} {:<28} {}\n", "node", "op", "inputs", "outputs", "params");
  for (const Node& n : g.nodes) {
    std::string ins, outs;
    for (ValueId i : n.inputs) {
      if (i == kNoValue) continue;
      const Value& v = g.value(i);
      if (v.kind == ValueKind::Parameter || v.kind == ValueKind::State) continue;
      if (!ins.empty()) ins += ' ';
      ins += to_string(v.shape);
      if (!v.shape_known) ins += '?';
    }
    for (ValueId o : n.outputs) {
      if (o == kNoValue) continue;
      if (!outs.empty()) outs += ' ';
      outs += g.value(o).shape_known ? to_string(g.value(o).shape) : std::string("?");
    }
    int64_t p = node_params(g, n);
    fmt::print(os, "{:<36} {:<20} {:<40} {:<28} {}\n", n.name, n.op_type, ins, outs,
               p ? std::to_string(p) : "");
  }
  if (r.blockers.empty()) {
    fmt::print(os, "\ntraining  every node is in the op catalog\n");
  } else {
    fmt::print(os, "\ntraining  BLOCKED by {} node{}:\n", r.blockers.size(),
               r.blockers.size() == 1 ? "" : "s");
    for (const auto& b : r.blockers)
      fmt::print(os, "  node '{}' ({}): {}\n", b.node, b.op_type, b.reason);
  }
}

void print_json(std::ostream& os, const std::string& file, const ImportResult& r) {
  const Graph& g = r.graph;
  ParamStats ps = param_stats(g);
  fmt::print(os, "{{\n  \"model\": {},\n  \"producer\": {},\n  \"ir_version\": {},\n",
             json_str(file), json_str(g.producer), g.ir_version);
  fmt::print(os, "  \"opset\": {},\n  \"nodes_in_file\": {},\n  \"nodes_folded\": {},\n", g.opset,
             r.nodes_in_file, r.nodes_folded);
  fmt::print(os, "  \"nodes_dead\": {},\n", r.nodes_dead);
  auto list = [&](const std::vector<ValueId>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + json_value(g.value(ids[i]));
    return s + "]";
  };
  fmt::print(os, "  \"inputs\": {},\n  \"outputs\": {},\n", list(g.inputs), list(g.outputs));
  fmt::print(
      os,
      "  \"parameters\": {{\"count\": {}, \"bytes\": {}, \"tensors\": {}, \"state_count\": {}, "
      "\"constant_node_tensors\": {}}},\n",
      ps.count, ps.bytes, ps.tensors, ps.state_count, ps.constant_node_tensors);
  std::string h;
  for (const auto& [op, n] : histogram(g))
    h += fmt::format("{}{}: {}", h.empty() ? "" : ", ", json_str(op), n);
  fmt::print(os, "  \"ops\": {{{}}},\n  \"nodes\": [\n", h);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    std::vector<ValueId> ins, outs;
    for (ValueId i : n.inputs)
      if (i != kNoValue) ins.push_back(i);
    for (ValueId o : n.outputs)
      if (o != kNoValue) outs.push_back(o);
    fmt::print(
        os, "    {{\"name\": {}, \"op\": {}, \"inputs\": {}, \"outputs\": {}, \"params\": {}}}{}\n",
        json_str(n.name), json_str(n.op_type), list(ins), list(outs), node_params(g, n),
        k + 1 < g.nodes.size() ? "," : "");
  }
  fmt::print(os, "  ],\n  \"trainable\": {},\n  \"blockers\": [",
             r.blockers.empty() ? "true" : "false");
  for (size_t k = 0; k < r.blockers.size(); ++k)
    fmt::print(os, "{}{{\"node\": {}, \"op\": {}, \"reason\": {}}}", k ? ", " : "",
               json_str(r.blockers[k].node), json_str(r.blockers[k].op_type),
               json_str(r.blockers[k].reason));
  fmt::print(os, "]\n}}\n");
}

void print_dot(std::ostream& os, const ImportResult& r) {
  const Graph& g = r.graph;
  auto q = [](std::string_view s) { return json_str(s); };  // dot accepts the same escapes
  fmt::print(os, "digraph {} {{\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n",
             q(g.name.empty() ? "model" : g.name));
  for (ValueId i : g.inputs)
    fmt::print(os, "  {} [shape=ellipse, label={}];\n", q("v:" + g.value(i).name),
               q(g.value(i).name + "\n" + type_str(g.value(i))));
  for (ValueId o : g.outputs)
    fmt::print(os, "  {} [shape=ellipse, label={}];\n", q("v:" + g.value(o).name),
               q(g.value(o).name + "\n" + type_str(g.value(o))));
  for (const Node& n : g.nodes) {
    int64_t p = node_params(g, n);
    std::string label = n.op_type + "\n" + n.name + (p ? fmt::format("\n{} params", p) : "");
    fmt::print(os, "  {} [label={}{}];\n", q("n:" + n.name), q(label),
               n.def ? "" : ", style=filled, fillcolor=\"#f4a4a4\"");
  }
  auto is_io = [&](ValueId v) {
    return std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end();
  };
  for (const Node& n : g.nodes) {
    for (ValueId i : n.inputs) {
      if (i == kNoValue) continue;
      const Value& v = g.value(i);
      if (v.producer >= 0)
        fmt::print(os, "  {} -> {} [label={}];\n",
                   q("n:" + g.nodes[static_cast<size_t>(v.producer)].name), q("n:" + n.name),
                   q(v.shape_known ? to_string(v.shape) : "?"));
      else if (is_io(i))
        fmt::print(os, "  {} -> {};\n", q("v:" + v.name), q("n:" + n.name));
    }
  }
  for (ValueId o : g.outputs) {
    const Value& v = g.value(o);
    if (v.producer >= 0)
      fmt::print(os, "  {} -> {};\n", q("n:" + g.nodes[static_cast<size_t>(v.producer)].name),
                 q("v:" + v.name));
  }
  fmt::print(os, "}}\n");
}

}  // namespace cb::tools

namespace cb::tools {

void print_plan_json(std::ostream& os, const MemoryPlan& p) {
  fmt::print(os,
             "{{\"memory\": {{\"batch\": {}, \"bytes_peak\": {}, \"bytes_naive\": {}, "
             "\"reuse_ratio\": {:.4f}, \"inplace\": {}, \"aliased\": {}}}}}\n",
             p.batch, p.bytes_peak, p.bytes_naive, p.reuse_ratio(), p.inplace, p.aliased);
}

}  // namespace cb::tools
