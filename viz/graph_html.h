// cb-inspect --html: the graph (forward, or the training graph) as one self-contained HTML file
// with an inline SVG: nodes in layers (each node one row below its deepest input), edges labelled
// with their tensor shapes, every node with its op, name, parameter count and the bytes of its
// outputs at the batch size, and a search box (a few lines of inline script, nothing fetched)
// that highlights the nodes whose op, name or tensors match.
#pragma once

#include <string>

#include "runtime/graph.h"

namespace cb::viz {

struct GraphViewOptions {
  std::string title;  // the model file, for the heading
  int64_t batch = 1;  // for the per-node memory
};

std::string render_graph_html(const Graph& g, const GraphViewOptions& o);

}  // namespace cb::viz
