// The run report (see report.h).
#include "viz/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "runtime/error.h"
#include "viz/svg.h"

namespace cb::viz {

using json = nlohmann::ordered_json;

std::vector<json> read_metrics(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open the metrics file", path);
  const std::string all((std::istreambuf_iterator<char>(f)), {});
  std::vector<json> out;
  size_t at = 0;
  for (int line = 1; at < all.size(); ++line) {
    const size_t nl = all.find('\n', at);
    if (nl == std::string::npos) break;  // a line still being written
    const std::string text = all.substr(at, nl - at);
    at = nl + 1;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      fail("{}:{}: not a JSON object (is this a cb-train --metrics file?)", path, line);
    out.push_back(std::move(j));
  }
  return out;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o || !(o << text) || !o.flush()) {
      o.close();
      std::remove(tmp.c_str());
      fail("{}: cannot write the file (is the folder writable, is the disk full?)", tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename {} into place", path, tmp);
  }
}

namespace {

double num(const json& j, const char* k, double dflt = NAN) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}
std::string str(const json& j, const char* k) {
  auto it = j.find(k);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
// A record's fields as table rows, in their order, without the `skip` keys.
std::vector<std::pair<std::string, std::string>> fields(const json& j,
                                                        std::initializer_list<std::string> skip) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const auto& [k, v] : j.items())
    if (std::find(skip.begin(), skip.end(), k) == skip.end())
      rows.emplace_back(k, str(j, k.c_str()));
  return rows;
}
std::string type_of(const json& j) { return j.contains("type") ? str(j, "type") : "eval"; }

std::string duration(double s) {
  if (!std::isfinite(s)) return "–";
  if (s < 60) return fmt::format("{:.1f} s", s);
  if (s < 3600)
    return fmt::format("{}m{:02d}s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}
std::string table(const std::vector<std::pair<std::string, std::string>>& rows,
                  const std::string& cls) {
  std::string h = fmt::format("<table class=\"{}\">\n", cls);
  for (const auto& [k, v] : rows)
    h += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", esc(k), esc(v));
  return h + "</table>\n";
}

const char* kCss =
    R"(body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}.sub{color:#666;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:150px}
.card .v{font-size:20px;font-weight:600}.card .k{font-size:12px;color:#666}
.charts{display:flex;flex-wrap:wrap;gap:14px}.charts svg{border:1px solid #ddd;border-radius:6px}
table{border-collapse:collapse;background:#fff;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px})";

}  // namespace

std::string render_report(const std::vector<json>& records) {
  json config = json::object(), summary;
  std::vector<json> evals, tunes;
  for (const json& r : records) {
    const std::string t = type_of(r);
    if (t == "config")
      config = r;
    else if (t == "tune")
      tunes.push_back(r);
    else if (t == "summary")
      summary = r;
    else if (t == "eval")
      evals.push_back(r);
  }
  const std::string model = str(config, "model");
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>crossbow run: {}</title>\n<style>{}</style></head><body>\n",
                   esc(model.empty() ? "report" : model), kCss);
  h += fmt::format(
      "<h1>crossbow run{}</h1>\n<div class=\"sub\">{}</div>\n",
      model.empty() ? "" : ": " + esc(model),
      esc(summary.is_null() ? "in progress (drawn at the last evaluation)" : "finished"));

  // Cards: the latest evaluation and the summary.
  const json last = evals.empty() ? json::object() : evals.back();
  const double target = num(config, "target_accuracy", 0);
  std::vector<std::pair<std::string, std::string>> cards;
  const double acc = num(last, "accuracy");
  // A regression run has R² and MAE instead of an accuracy.
  const bool regression = last.contains("test_r2") && !std::isfinite(acc);
  if (regression) {
    cards.emplace_back("test R²", fmt::format("{:.4f}", num(last, "test_r2")));
    const double mae = num(last, "test_mae");
    cards.emplace_back("test MAE", std::isfinite(mae) ? fmt::format("{:.4g}", mae) : "–");
  } else {
    cards.emplace_back("test accuracy",
                       std::isfinite(acc) ? fmt::format("{:.2f}%", 100 * acc) : "–");
  }
  const double tl = num(last, "test_loss");
  cards.emplace_back("test loss", std::isfinite(tl) ? fmt::format("{:.4f}", tl) : "–");
  cards.emplace_back("epochs", std::isfinite(num(last, "epoch"))
                                   ? fmt::format("{:.2f}", num(last, "epoch"))
                                   : "–");
  cards.emplace_back("steps", last.contains("step") ? str(last, "step") : "–");
  const double ips = summary.is_null() ? num(last, "images_per_s") : num(summary, "images_per_s");
  cards.emplace_back("images/s", std::isfinite(ips) ? short_number(ips) : "–");
  cards.emplace_back("time",
                     duration(summary.is_null() ? num(last, "time") : num(summary, "seconds")));
  if (target > 0) {
    std::string reached = "not reached";
    if (!summary.is_null() && summary.value("target_reached", false)) {
      reached = fmt::format("{} (epoch {:.2f})", duration(num(summary, "target_seconds")),
                            num(summary, "target_epoch"));
    } else {
      for (const json& e : evals)
        if (num(e, "accuracy", -1) >= target) {
          reached = fmt::format("{} (epoch {:.2f})", duration(num(e, "time")), num(e, "epoch"));
          break;
        }
    }
    cards.emplace_back(fmt::format("time to {:.2f}%", 100 * target), reached);
  }
  h += "<div class=\"cards\">\n";
  for (const auto& [k, v] : cards)
    h += fmt::format(
        "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>\n", esc(v),
        esc(k));
  h += "</div>\n";

  // Charts.
  auto series = [&](const char* name, const char* xk, const char* yk, const char* color,
                    bool dashed = false) {
    Series s;
    s.name = name;
    s.color = color;
    s.dashed = dashed;
    for (const json& e : evals) s.points.emplace_back(num(e, xk), num(e, yk));
    return s;
  };
  std::vector<std::pair<double, std::string>> marks;
  for (const json& t : tunes)
    marks.emplace_back(num(t, "time"),
                       fmt::format("tuner: {} -> {} learners/device ({})", str(t, "measured"),
                                   str(t, "learners"), str(t, "action")));
  ChartOptions o;
  h += "<h2>Training</h2>\n<div class=\"charts\">\n";
  o.title = "Loss against time";
  o.x_label = "seconds";
  o.y_label = "loss";
  h += line_chart({series("train loss", "time", "loss", "#1f77b4"),
                   series("test loss", "time", "test_loss", "#d62728", true)},
                  o);
  o.title = "Loss against epochs";
  o.x_label = "epoch";
  h += line_chart({series("train loss", "epoch", "loss", "#1f77b4"),
                   series("test loss", "epoch", "test_loss", "#d62728", true)},
                  o);
  // The score charts: R² for a regression run, else the accuracy.
  const char* score = regression ? "test R²" : "test accuracy";
  const char* score_key = regression ? "test_r2" : "accuracy";
  const std::string score_title = regression ? "R²" : "Accuracy";
  ChartOptions a;
  a.percent = !regression;
  a.y_label = score;
  if (target > 0) {
    a.h_line = target;
    a.h_line_label = fmt::format("target {:.2f}%", 100 * target);
  }
  a.title = score_title + " against time";
  a.x_label = "seconds";
  h += line_chart({series(score, "time", score_key, "#2ca02c")}, a);
  a.title = score_title + " against epochs";
  a.x_label = "epoch";
  h += line_chart({series(score, "epoch", score_key, "#2ca02c")}, a);
  ChartOptions t;
  t.title = "Throughput (tuner decisions marked)";
  t.x_label = "seconds";
  t.y_label = "images/s";
  t.x_marks = marks;
  h += line_chart({series("images/s", "time", "images_per_s", "#9467bd")}, t);
  ChartOptions l;
  l.title = "Learners";
  l.x_label = "seconds";
  l.y_label = "learners in all";
  l.y_min = 0;
  h += line_chart({series("learners", "time", "learners", "#8c564b")}, l);
  ChartOptions s;
  s.title = "SMA spread (mean distance of the replicas from z)";
  s.x_label = "epoch";
  s.y_label = "L2 distance";
  h += line_chart({series("spread", "epoch", "spread", "#ff7f0e")}, s);
  ChartOptions w;
  w.title = "Time waiting for data (per evaluation interval)";
  w.x_label = "epoch";
  w.y_label = "seconds";
  h += line_chart({series("data wait", "epoch", "data_wait_s", "#7f7f7f")}, w);
  h += "</div>\n";

  // Tuner decisions.
  h += "<h2>Auto-tuner decisions</h2>\n";
  if (tunes.empty()) {
    h += "<p class=\"sub\">none (a fixed number of learners, or no decision yet)</p>\n";
  } else {
    h += "<table class=\"tuner\"><tr><th>time</th><th>measured learners/device</th>"
         "<th>images/s</th><th>gain</th><th>needed</th><th>decision</th><th>reason</th></tr>\n";
    for (const json& d : tunes)
      h += fmt::format(
          "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td>"
          "<td class=\"num\">{:.0f}</td><td class=\"num\">{:+.1f}%</td>"
          "<td class=\"num\">{:.1f}%</td><td>{} &#8594; {}</td><td>{}</td></tr>\n",
          esc(duration(num(d, "time"))), esc(str(d, "measured")), num(d, "images_per_s", 0),
          100 * num(d, "gain", 0), 100 * num(d, "required", 0), esc(str(d, "action")),
          esc(str(d, "learners")), esc(str(d, "reason")));
    h += "</table>\n";
  }

  // Configuration and memory.
  h += "<h2>Configuration</h2>\n";
  const auto rows = fields(config, {"type", "memory"});
  h += rows.empty() ? "<p class=\"sub\">no configuration record</p>\n" : table(rows, "config");
  h += "<h2>Memory plan (one device)</h2>\n";
  if (config.contains("memory") && config["memory"].is_object()) {
    const json& m = config["memory"];
    h += table({{"activation arena per replica (the plan's peak)", bytes_text(num(m, "arena"))},
                {"per replica (arena + parameters, gradients, optimizer state, BN statistics)",
                 bytes_text(num(m, "per_replica"))},
                {"fixed (z, z_prev, the sum, the average model and BN statistics)",
                 bytes_text(num(m, "fixed"))},
                {"budget for the learners of one device", bytes_text(num(m, "budget"))}},
               "memory");
  } else {
    h += "<p class=\"sub\">not recorded</p>\n";
  }
  if (!summary.is_null()) {
    h += "<h2>Summary</h2>\n";
    h += table(fields(summary, {"type", "ranks"}), "summary");
  }
  if (!summary.is_null() && summary.contains("ranks") && summary["ranks"].is_array()) {
    // One row per process of an mpirun job: a slow node has the lowest forward/backward rate
    // (the others wait for it in the sums) or the longest data wait.
    h += "<h2>Ranks (processes)</h2>\n<table class=\"ranks\">\n<tr><th>rank</th><th>host</th>"
         "<th>training examples made</th><th>test examples made</th><th>forward/backward per "
         "s</th><th>data wait (s)</th></tr>\n";
    for (const json& r : summary["ranks"])
      h += fmt::format(
          "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td "
          "class=\"num\">{}</td><td class=\"num\">{:.0f}</td><td "
          "class=\"num\">{:.2f}</td></tr>\n",
          esc(str(r, "rank")), esc(str(r, "host")), esc(str(r, "examples_made")),
          esc(str(r, "test_examples_made")), num(r, "compute_per_s"), num(r, "data_wait_s"));
    h += "</table>\n";
  }
  h += "</body></html>\n";
  return h;
}

}  // namespace cb::viz
