// libFuzzer target: the NumPy readers (runtime/data/npy.h). The input, copied into a buffer of
// exactly its size (so ASan sees any read past it), goes to parse_npz and then to parse_npy; every
// array returned is read whole (a checksum of its bytes) so a pointer or size that lies shows up.
// Inflated members and big copies go to a per-process temporary folder, emptied each run. Bad
// inputs must end in cb::Error. Seeds: .npy and .npz files NumPy wrote (tools/fuzz/run.sh).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/checksum.h"
#include "runtime/data/npy.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace {

void touch(const cb::NpyArray& a) {
  if (a.bytes() != static_cast<size_t>(a.numel()) * cb::dtype_size(a.dtype)) __builtin_trap();
  volatile uint32_t sink = cb::crc32_of(a.data(), a.bytes());
  (void)sink;
}

}  // namespace

// One input; returns 0. Only cb::Error is caught: anything else escapes (a bug).
int fuzz_npy(const uint8_t* data, size_t size) {
  static const fs::path dir =
      fs::temp_directory_path() / ("cb_fuzz_npy_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  cb::NpyOptions o;
  o.temp_dir = dir.string();
  o.heap_limit = 4096;  // bigger copies take the temporary-file path too
  std::shared_ptr<std::byte[]> buf(new std::byte[size > 0 ? size : 1]);
  if (size > 0) std::memcpy(buf.get(), data, size);
  for (bool unaligned_ok : {false, true}) {
    o.unaligned_ok = unaligned_ok;
    try {
      for (const cb::NpyArray& a : cb::parse_npz(buf, buf.get(), size, "fuzz.npz", o)) touch(a);
    } catch (const cb::Error&) {
    }
  }
  try {
    touch(cb::parse_npy(buf, buf.get(), size, "fuzz.npy", o));
  } catch (const cb::Error&) {
  }
  return 0;
}

#ifndef CB_FUZZ_NO_MAIN  // tests/test_fuzz_regressions.cpp calls fuzz_npy() on saved inputs
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_npy(data, size);
}
#endif
