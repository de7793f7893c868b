// cb-report METRICS.jsonl --out run.html
// Draws the run report (viz/report.h: one self-contained HTML file, inline SVG) from the
// records cb-train --metrics wrote; works on a run still in progress. Exit codes: 0 written;
// 1 bad input (the metrics file, the output); 2 usage.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "runtime/error.h"
#include "viz/report.h"

using namespace cb;

int main(int argc, char** argv) {
  CLI::App app{"cb-report: draw a cb-train run (its --metrics file) as one HTML file"};
  std::string metrics, out;
  app.add_option("metrics", metrics, "the JSON-lines file cb-train --metrics wrote")->required();
  app.add_option("--out,-o", out, "the HTML file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const auto records = viz::read_metrics(metrics);
    if (records.empty()) fail("{}: no records (has the run written its first line yet?)", metrics);
    viz::write_file_atomically(out, viz::render_report(records));
    fmt::print("wrote    {} ({} records)\n", out, records.size());
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "cb-report: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cb-report: internal error: {}\n", e.what());
    return 1;
  }
}
