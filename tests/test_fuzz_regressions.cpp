// Every input a fuzzer found a bug with (tests/fuzz_regressions/<target>/) runs through the same
// harness as the fuzzer (tools/fuzz/fuzz_<target>.cpp, built here without libFuzzer's main): it
// must end in a cb::Error (caught by the harness) or succeed; anything else fails the test.
// tools/fuzz/run.sh saves new finds in build-fuzz/crashes/<target>/; a fixed one is copied here.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "tests/fuzz_targets.h"

namespace fs = std::filesystem;

TEST_CASE("fuzz regressions: each saved input ends in a clear error, never a crash") {
  const fs::path root = fs::path(CB_SOURCE_DIR) / "tests" / "fuzz_regressions";
  int inputs = 0;
  for (const auto& [name, fn] : cb::test::kFuzzTargets) {
    if (!fs::is_directory(root / name)) continue;
    for (const auto& e : fs::directory_iterator(root / name)) {
      CAPTURE(e.path().string());
      std::ifstream f(e.path(), std::ios::binary);
      const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), {}};
      CHECK_NOTHROW(fn(bytes.data(), bytes.size()));
      ++inputs;
    }
  }
  CHECK(inputs >= 1);
}
