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

int fuzz_importer(const uint8_t* data, size_t size);
int fuzz_image(const uint8_t* data, size_t size);
int fuzz_data(const uint8_t* data, size_t size);
int fuzz_checkpoint(const uint8_t* data, size_t size);
int fuzz_npy(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

TEST_CASE("fuzz regressions: each saved input ends in a clear error, never a crash") {
  const fs::path root = fs::path(CB_SOURCE_DIR) / "tests" / "fuzz_regressions";
  const std::pair<const char*, int (*)(const uint8_t*, size_t)> targets[] = {
      {"importer", fuzz_importer},
      {"image", fuzz_image},
      {"data", fuzz_data},
      {"checkpoint", fuzz_checkpoint},
      {"npy", fuzz_npy}};
  int inputs = 0;
  for (const auto& [name, fn] : targets) {
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
