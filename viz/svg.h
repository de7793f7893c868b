// Inline SVG for crossbow's self-contained HTML views (the run report, the graph view): XML
// escaping, "nice" axis ticks, and a line chart. No scripts, no external resources.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cb::viz {

// `s` with & < > " ' escaped for XML text and attribute values.
std::string esc(std::string_view s);

// About `n` round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart).
std::vector<double> nice_ticks(double lo, double hi, int n);

// A number as a short label: 12.3k, 0.0123, 1.5M.
std::string short_number(double v);

// Bytes as "1.5 MiB" ("–" for a non-finite value).
std::string bytes_text(double b);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), any order of x is drawn as given
  std::string color = "#1f77b4";
  bool dashed = false;
  bool dots = true;  // a circle at every point (class "pt")
};

struct ChartOptions {
  std::string title, x_label, y_label;
  int width = 560, height = 300;
  std::optional<double> y_min, y_max;  // default: from the data (y_min 0 when all y >= 0)
  bool percent = false;                // y values in [0,1] labelled as percent
  std::optional<double> h_line;        // a horizontal reference (a target), labelled
  std::string h_line_label;
  std::vector<std::pair<double, std::string>> x_marks;  // vertical markers (tuner decisions)
};

// An <svg class="chart"> with axes, grid, ticks, one <polyline class="series"> per series with
// points, optional markers and a legend; "no data yet" when no series has a point.
std::string line_chart(const std::vector<Series>& series, const ChartOptions& o);

}  // namespace cb::viz
