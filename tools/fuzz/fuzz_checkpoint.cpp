// libFuzzer target: the checkpoint reader (sma/checkpoint.h). The input is split at its first
// NUL byte into the body of a MANIFEST and a tensors.bin; half the time (last byte odd) the
// harness appends the right tensors_bin and final checksum lines, so that the parser behind the
// checksums is reached too (a fuzzer cannot forge CRC-32s), else the body is the whole file.
// A bad checkpoint must end in cb::Error. Seeds: checkpoints cb-train writes (tools/fuzz/run.sh
// turns them into this format).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "runtime/checksum.h"
#include "runtime/error.h"
#include "sma/checkpoint.h"

namespace fs = std::filesystem;

// One input; returns 0. Only cb::Error is caught: anything else escapes (a bug).
int fuzz_checkpoint(const uint8_t* data, size_t size) {
  static const fs::path dir =
      fs::temp_directory_path() / ("cb_fuzz_ckpt_" + std::to_string(getpid())) / "ckpt-0000000001";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t m = nul ? static_cast<size_t>(nul - data) : size;
  std::string manifest(reinterpret_cast<const char*>(data), m);
  const std::string bin =
      nul ? std::string(reinterpret_cast<const char*>(nul + 1), size - m - 1) : std::string();
  if (size > 0 && (data[size - 1] & 1)) {
    auto crc = [](const std::string& s) { return cb::crc32_of(s.data(), s.size()); };
    if (!manifest.empty() && manifest.back() != '\n') manifest += '\n';
    manifest += fmt::format("tensors_bin {} {:08x}\n", bin.size(), crc(bin));
    manifest += fmt::format("end {:08x}\n", crc(manifest));
  }
  std::ofstream(dir / "MANIFEST", std::ios::binary) << manifest;
  std::ofstream(dir / "tensors.bin", std::ios::binary) << bin;
  try {
    cb::load_checkpoint(dir.string());
  } catch (const cb::Error&) {
  }
  return 0;
}

#ifndef CB_FUZZ_NO_MAIN  // tests/test_fuzz_regressions.cpp calls fuzz_checkpoint() on saved inputs
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_checkpoint(data, size);
}
#endif
