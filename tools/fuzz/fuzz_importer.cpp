// libFuzzer target: the ONNX importer (parse, checks, shape inference, folding) and the memory
// planner on whatever it accepts. Bad input must end in cb::Error; anything else (a crash, a
// sanitizer report, an InternalError, a hang) is a bug. Seeds: models/*.onnx, tests/malformed/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "importer/onnx_importer.h"
#include "runtime/error.h"
#include "runtime/memory_plan.h"

// One input; returns 0. Only cb::Error is caught: anything else escapes (a bug).
int fuzz_importer(const uint8_t* data, size_t size) {
  try {
    cb::ImportResult r = cb::import_model_bytes(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx", "");
    cb::plan_memory(r.graph, 2);
  } catch (const cb::Error&) {
  }
  return 0;
}

#ifndef CB_FUZZ_NO_MAIN  // tests/test_fuzz_regressions.cpp calls fuzz_importer() on saved inputs
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_importer(data, size);
}
#endif
