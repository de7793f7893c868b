// Inline SVG (see svg.h).
#include "viz/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace cb::viz {

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string short_number(double v) {
  const double a = std::abs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a == 0) return "0";
  return fmt::format("{:.3g}", v);
}

std::string bytes_text(double b) {
  if (!std::isfinite(b)) return "\u2013";
  if (b >= 1 << 30) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (b >= 1 << 20) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (b >= 1 << 10) return fmt::format("{:.1f} KiB", b / (1 << 10));
  return fmt::format("{:.0f} B", b);
}

std::string line_chart(const std::vector<Series>& series, const ChartOptions& o) {
  const int W = o.width, H = o.height, L = 62, R = 16, T = 30, B = 46;
  const int pw = W - L - R, ph = H - T - B;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t points = 0;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
      ++points;
    }
  std::string svg = fmt::format(
      "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#fff\"/>\n"
      "<text class=\"title\" x=\"{3}\" y=\"18\" font-size=\"14\" font-weight=\"600\">{2}</text>\n",
      W, H, esc(o.title), L);
  if (points == 0) {
    svg += fmt::format(
        "<text class=\"empty\" x=\"{}\" y=\"{}\" fill=\"#888\" font-size=\"13\" "
        "text-anchor=\"middle\">no data yet</text>\n</svg>\n",
        L + pw / 2, T + ph / 2);
    return svg;
  }
  if (o.h_line) {
    y0 = std::min(y0, *o.h_line);
    y1 = std::max(y1, *o.h_line);
  }
  if (o.y_min)
    y0 = *o.y_min;
  else if (y0 >= 0 && y0 < 0.5 * y1)
    y0 = 0;
  if (o.y_max) y1 = std::max(*o.y_max, y1);
  if (x1 <= x0) {
    x0 -= 0.5;
    x1 += 0.5;
  }
  if (y1 <= y0) {
    const double pad = y0 == 0 ? 1 : std::abs(y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  const std::vector<double> xt = nice_ticks(x0, x1, 6), yt = nice_ticks(y0, y1, 5);
  y0 = std::min(y0, yt.front());
  y1 = std::max(y1, yt.back());
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return T + ph - (y - y0) / (y1 - y0) * ph; };
  auto ylabel = [&](double v) {
    return o.percent ? fmt::format("{:.3g}%", 100 * v) : short_number(v);
  };
  // Grid and ticks.
  for (double v : yt) {
    if (v < y0 - 1e-12 || v > y1 + 1e-12) continue;
    svg += fmt::format(
        "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#eee\"/>"
        "<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#555\" "
        "text-anchor=\"end\">{}</text>\n",
        L, L + pw, Y(v), Y(v), L - 6, Y(v) + 4, esc(ylabel(v)));
  }
  for (double v : xt) {
    if (v < x0 - 1e-12 || v > x1 + 1e-12) continue;
    svg += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{}\" y2=\"{}\" stroke=\"#f3f3f3\"/>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" font-size=\"11\" fill=\"#555\" "
        "text-anchor=\"middle\">{}</text>\n",
        X(v), X(v), T, T + ph, X(v), T + ph + 15, esc(short_number(v)));
  }
  svg += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#333\"/>"
      "<line class=\"axis\" x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\" stroke=\"#333\"/>\n"
      "<text class=\"xlabel\" x=\"{4}\" y=\"{5}\" font-size=\"12\" "
      "text-anchor=\"middle\">{6}</text>"
      "<text class=\"ylabel\" transform=\"translate(14 {7}) rotate(-90)\" font-size=\"12\" "
      "text-anchor=\"middle\">{8}</text>\n",
      L, T, T + ph, L + pw, L + pw / 2, H - 8, esc(o.x_label), T + ph / 2, esc(o.y_label));
  for (const auto& [x, label] : o.x_marks) {
    if (x < x0 || x > x1) continue;
    svg += fmt::format(
        "<line class=\"mark\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#c77\" "
        "stroke-dasharray=\"3 3\"><title>{3}</title></line>\n",
        X(x), T, T + ph, esc(label));
  }
  if (o.h_line) {
    svg += fmt::format(
        "<line class=\"target\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#2a2\" "
        "stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#2a2\" "
        "text-anchor=\"end\">{}</text>\n",
        L, L + pw, Y(*o.h_line), Y(*o.h_line), L + pw - 4, Y(*o.h_line) - 4, esc(o.h_line_label));
  }
  // Series.
  for (const Series& s : series) {
    std::string pts;
    for (auto [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
    if (pts.empty()) continue;
    svg += fmt::format(
        "<polyline class=\"series\" data-name=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"2\"{} points=\"{}\"/>\n",
        esc(s.name), s.color, s.dashed ? " stroke-dasharray=\"5 4\"" : "", pts);
    if (s.dots && s.points.size() <= 400)
      for (auto [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += fmt::format(
              "<circle class=\"pt\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\">"
              "<title>{}: {} at {}</title></circle>\n",
              X(x), Y(y), s.color, esc(s.name), esc(ylabel(y)), esc(short_number(x)));
  }
  // Legend.
  int lx = L + 8;
  for (const Series& s : series) {
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"3\" fill=\"{}\"/>"
        "<text class=\"legend\" x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n",
        lx, T + 6, s.color, lx + 18, T + 10, esc(s.name));
    lx += 30 + static_cast<int>(s.name.size()) * 6;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace cb::viz
