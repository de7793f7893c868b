// The run report: one self-contained HTML file (inline SVG and CSS, no scripts, nothing fetched)
// drawn from a run's records, the JSON lines cb-train --metrics writes:
//   {"type": "config", ...}   once, at the start: model, data, optimizer, learners, memory plan
//   {"type": "tune", ...}     each auto-tuner decision
//   {"type": "eval", ...}     each evaluation (a line without "type" is one too: older files)
//   {"type": "summary", ...}  once, at the end: totals and the time to the target accuracy
// cb-train --report FILE redraws it at every evaluation; cb-report METRICS --out FILE draws it
// from a metrics file afterwards.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cb::viz {

// The records of a metrics file. Throws cb::Error naming the file and line of a bad record; a
// last line without its newline (a run still writing it) is ignored.
std::vector<nlohmann::ordered_json> read_metrics(const std::string& path);

// The report's HTML.
std::string render_report(const std::vector<nlohmann::ordered_json>& records);

// Writes `text` to `path` through path.tmp and a rename; throws cb::Error naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace cb::viz
