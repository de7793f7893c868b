// Small helpers shared by the test files: the message of the cb::Error a call throws, and a
// substring check for asserting on it.
#pragma once

#include <functional>
#include <string>

#include "runtime/error.h"

namespace cb::test {

// The what() of the cb::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace cb::test
