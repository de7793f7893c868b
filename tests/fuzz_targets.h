// The libFuzzer harnesses (tools/fuzz/fuzz_<name>.cpp), compiled into cb-tests without
// libFuzzer's main (CB_FUZZ_NO_MAIN), as one table for the tests that drive them:
// test_fuzz_regressions.cpp (saved finds) and test_fuzz_smoke.cpp (the saved corpus and its
// mutations). A harness returns 0 and catches only cb::Error; anything else escaping is a bug.
#pragma once

#include <cstddef>
#include <cstdint>

int fuzz_importer(const uint8_t* data, size_t size);
int fuzz_image(const uint8_t* data, size_t size);
int fuzz_data(const uint8_t* data, size_t size);
int fuzz_checkpoint(const uint8_t* data, size_t size);
int fuzz_npy(const uint8_t* data, size_t size);

namespace cb::test {

struct FuzzTarget {
  const char* name;  // tools/fuzz/fuzz_<name>.cpp, tests/fuzz_corpus/<name>/, ...
  int (*fn)(const uint8_t* data, size_t size);
};

inline constexpr FuzzTarget kFuzzTargets[] = {{"importer", fuzz_importer},
                                              {"image", fuzz_image},
                                              {"data", fuzz_data},
                                              {"checkpoint", fuzz_checkpoint},
                                              {"npy", fuzz_npy}};

}  // namespace cb::test
