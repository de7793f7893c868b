// cb-inspect's three views of an imported model: a readable summary, JSON, and Graphviz dot.
#pragma once

#include <ostream>
#include <string>

#include "importer/onnx_importer.h"
#include "runtime/memory_plan.h"

namespace cb::tools {

void print_text(std::ostream& os, const std::string& file, const ImportResult& r);
void print_json(std::ostream& os, const std::string& file, const ImportResult& r);
void print_dot(std::ostream& os, const ImportResult& r);
// The memory plan as one JSON object on its own line (after the model's JSON).
void print_plan_json(std::ostream& os, const MemoryPlan& p);

}  // namespace cb::tools
