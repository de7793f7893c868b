// The graph view (see graph_html.h).
#include "viz/graph_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "runtime/dtype.h"
#include "viz/svg.h"

namespace cb::viz {

namespace {

constexpr int kBoxW = 200, kBoxH = 52, kGapX = 36, kGapY = 64, kMargin = 30;

std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 1) + "\u2026";
}

// One box of the drawing: a node, a graph input or a graph output.
struct Box {
  enum Kind { Input, Op, Output } kind = Op;
  std::string title, subtitle, detail, search;
  int layer = 0;
  double x = 0;  // centre
  std::vector<int> preds;
  std::vector<ValueId> pred_values;  // the value each pred edge carries
};

}  // namespace

std::string render_graph_html(const Graph& g, const GraphViewOptions& o) {
  auto value_bytes = [&](const Value& v) -> double {
    if (!v.shape_known) return 0;
    double n = static_cast<double>(dtype_size(v.dtype));
    for (const Dim& d : v.shape) n *= static_cast<double>(d.resolve(o.batch));
    return n;
  };
  std::vector<Box> boxes;
  std::map<ValueId, int> producer;  // value -> box
  for (ValueId in : g.inputs) {
    const Value& v = g.value(in);
    Box b;
    b.kind = Box::Input;
    b.title = "input " + v.name;
    b.subtitle = fmt::format("{} {}", dtype_name(v.dtype), to_string(v.shape));
    b.search = v.name;
    producer[in] = static_cast<int>(boxes.size());
    boxes.push_back(std::move(b));
  }
  int64_t total_params = 0;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    Box b;
    b.title = node.op_type;
    b.subtitle = node.name;
    int64_t params = 0;
    double out_bytes = 0;
    std::string tensors;
    for (ValueId in : node.inputs) {
      if (in == kNoValue) continue;
      const Value& v = g.value(in);
      tensors += " " + v.name;
      if (v.kind == ValueKind::Parameter) {
        int64_t k = 1;
        for (const Dim& d : v.shape) k *= d.resolve(1);
        params += k;
      }
      auto p = producer.find(in);
      if (p != producer.end()) {
        b.preds.push_back(p->second);
        b.pred_values.push_back(in);
      }
    }
    for (ValueId out : node.outputs) {
      if (out == kNoValue) continue;
      out_bytes += value_bytes(g.value(out));
      tensors += " " + g.value(out).name;
      producer[out] = static_cast<int>(boxes.size());
    }
    total_params += params;
    b.detail = params > 0
                   ? fmt::format("{} params · out {}", short_number(static_cast<double>(params)),
                                 bytes_text(out_bytes))
                   : fmt::format("out {}", bytes_text(out_bytes));
    b.search = node.op_type + " " + node.name + tensors;
    boxes.push_back(std::move(b));
  }
  for (ValueId out : g.outputs) {
    const Value& v = g.value(out);
    Box b;
    b.kind = Box::Output;
    b.title = "output " + v.name;
    b.subtitle = fmt::format("{} {}", dtype_name(v.dtype), to_string(v.shape));
    b.search = v.name;
    auto p = producer.find(out);
    if (p != producer.end()) {
      b.preds.push_back(p->second);
      b.pred_values.push_back(out);
    }
    boxes.push_back(std::move(b));
  }
  // Layers: one below the deepest predecessor (boxes are in topological order).
  int layers = 0;
  for (Box& b : boxes) {
    for (int p : b.preds) b.layer = std::max(b.layer, boxes[static_cast<size_t>(p)].layer + 1);
    layers = std::max(layers, b.layer + 1);
  }
  std::vector<std::vector<int>> rows(static_cast<size_t>(layers));
  for (size_t i = 0; i < boxes.size(); ++i)
    rows[static_cast<size_t>(boxes[i].layer)].push_back(static_cast<int>(i));
  // Order within a layer by the mean position of the predecessors (one barycentre pass), then
  // place side by side, centred.
  size_t widest = 1;
  for (const auto& r : rows) widest = std::max(widest, r.size());
  const double width = 2 * kMargin + static_cast<double>(widest) * (kBoxW + kGapX) + 120;
  for (auto& r : rows) {
    std::vector<double> key(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      const Box& b = boxes[static_cast<size_t>(r[i])];
      double s = 0;
      for (int p : b.preds) s += boxes[static_cast<size_t>(p)].x;
      key[i] = b.preds.empty() ? static_cast<double>(i) : s / static_cast<double>(b.preds.size());
    }
    std::vector<size_t> idx(r.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
    const double row_w = static_cast<double>(r.size()) * (kBoxW + kGapX) - kGapX;
    double x = (width - row_w) / 2 + kBoxW / 2.0;
    for (size_t i : idx) {
      boxes[static_cast<size_t>(r[i])].x = x;
      x += kBoxW + kGapX;
    }
  }
  const double height = 2 * kMargin + layers * (kBoxH + kGapY);
  auto top = [&](const Box& b) { return kMargin + b.layer * (kBoxH + kGapY); };

  std::string svg = fmt::format(
      "<svg id=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"8\" "
      "refY=\"4\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 "
      "z\" fill=\"#888\"/></marker></defs>\n",
      width, height);
  // Edges first (under the boxes), each with its tensor's shape.
  for (const Box& b : boxes)
    for (size_t i = 0; i < b.preds.size(); ++i) {
      const Box& a = boxes[static_cast<size_t>(b.preds[i])];
      const Value& v = g.value(b.pred_values[i]);
      const int span = b.layer - a.layer;
      std::string path;
      double lx, ly;
      if (span > 1 && std::abs(a.x - b.x) < kBoxW) {
        // A long edge past the boxes between: out of the right side, around, back in.
        const double x = a.x + kBoxW / 2.0, y1 = top(a) + kBoxH / 2.0, y2 = top(b) + kBoxH / 2.0;
        const double bulge = x + 40 + 12 * (span % 4);
        path = fmt::format("M{:.1f},{:.1f} C{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}", x, y1,
                           bulge, y1, bulge, y2, x + 1, y2);
        lx = bulge - 6;
        ly = (y1 + y2) / 2;
      } else {
        const double x1 = a.x, y1 = top(a) + kBoxH, x2 = b.x, y2 = top(b);
        const double my = (y1 + y2) / 2;
        path = fmt::format("M{:.1f},{:.1f} C{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}", x1, y1, x1,
                           my, x2, my, x2, y2 - 1);
        lx = (x1 + x2) / 2 + 4;
        ly = my + 3;
      }
      svg += fmt::format(
          "<g class=\"edge\"><path d=\"{}\" fill=\"none\" stroke=\"#999\" "
          "marker-end=\"url(#arrow)\"/><text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" "
          "fill=\"#666\" text-anchor=\"middle\">{}</text><title>{} {} {}</title></g>\n",
          path, lx, ly, esc(to_string(v.shape)), esc(v.name), dtype_name(v.dtype),
          esc(to_string(v.shape)));
    }
  for (const Box& b : boxes) {
    const char* cls = b.kind == Box::Input ? "node io" : b.kind == Box::Output ? "node io" : "node";
    const char* fill = b.kind == Box::Op
                           ? (b.detail.find("params") != std::string::npos ? "#e8f0fe" : "#fff")
                           : "#f4f4f4";
    svg += fmt::format(
        "<g class=\"{}\" data-search=\"{}\"><rect x=\"{:.1f}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "rx=\"6\" fill=\"{}\" stroke=\"#4a6fa5\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" font-weight=\"600\" "
        "text-anchor=\"middle\">{}</text>"
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"10\" fill=\"#555\" "
        "text-anchor=\"middle\">{}</text>"
        "<text x=\"{:.1f}\" y=\"{}\" font-size=\"10\" fill=\"#555\" "
        "text-anchor=\"middle\">{}</text>"
        "<title>{}\n{}\n{}</title></g>\n",
        cls, esc(b.search), b.x - kBoxW / 2.0, top(b), kBoxW, kBoxH, fill, b.x, top(b) + 16,
        esc(shorten(b.title, 30)), b.x, top(b) + 31, esc(shorten(b.subtitle, 36)), b.x, top(b) + 45,
        esc(b.detail), esc(b.title), esc(b.subtitle), esc(b.detail));
  }
  svg += "</svg>\n";

  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>crossbow graph: {}</title>\n", esc(o.title));
  h += R"(<style>body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222}
header{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ddd;padding:10px 16px;z-index:1}
h1{font-size:18px;margin:0 0 4px}.sub{font-size:13px;color:#555}input{font-size:14px;padding:4px 8px;width:260px;margin-top:6px}
svg text{font-family:inherit}g.node.dim{opacity:.25}g.node.hit rect{stroke:#d62728;stroke-width:3}
#count{font-size:13px;color:#555;margin-left:8px}</style></head><body>
)";
  h += fmt::format(
      "<header><h1>{}</h1><div class=\"sub\">{} nodes · {} parameters · {} inputs · {} outputs · "
      "memory per node: output bytes at batch {}</div>\n"
      "<input id=\"q\" type=\"search\" placeholder=\"search ops, names, tensors\" "
      "oninput=\"find(this.value)\"><span id=\"count\"></span></header>\n",
      esc(o.title), g.nodes.size(), short_number(static_cast<double>(total_params)),
      g.inputs.size(), g.outputs.size(), o.batch);
  h += "<main>\n" + svg + "</main>\n";
  h += R"(<script>
function find(q) {
  q = q.trim().toLowerCase();
  let hits = 0, first = null;
  for (const n of document.querySelectorAll('g.node')) {
    const hit = q !== '' && n.dataset.search.toLowerCase().includes(q);
    n.classList.toggle('hit', hit);
    n.classList.toggle('dim', q !== '' && !hit);
    if (hit) { hits++; if (!first) first = n; }
  }
  document.getElementById('count').textContent = q === '' ? '' : hits + ' match' + (hits === 1 ? '' : 'es');
  if (first) first.scrollIntoView({block: 'center', inline: 'center'});
}
</script>
</body></html>
)";
  return h;
}

}  // namespace cb::viz
