// Errors, in three tiers:
//  - user input (a model, a file, a flag) is wrong  -> throw cb::Error with context and a hint;
//  - an invariant of ours is broken                   -> CB_CHECK, which names file:line;
//  - a device call failed                             -> the backend's checked wrapper (later).
// Messages say where and what next: "[Gemm node 'fc1'] inner dims differ: A [32,128] vs B [64,10]".
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace cb {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string msg) : std::runtime_error(std::move(msg)) {}
};

// A limit of crossbow's (the rank of a tensor, say) that input exceeded: bad input, thrown where
// the node is not known; the op catalog adds the node's name as it passes.
class LimitError : public Error {
 public:
  explicit LimitError(std::string msg) : Error(std::move(msg)) {}
};

// The run failed although its input was accepted: training diverged, another rank failed, a
// device failed (the public API reports it as a run error, cb-train like any error).
class RunError : public Error {
 public:
  explicit RunError(std::string msg) : Error(std::move(msg)) {}
};

// A broken invariant inside crossbow (a bug, not bad input).
class InternalError : public std::logic_error {
 public:
  explicit InternalError(std::string msg) : std::logic_error(std::move(msg)) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_run(fmt::format_string<Args...> f, Args&&... args) {
  throw RunError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace cb

#define CB_CHECK(cond)                                                                           \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::cb::InternalError(                                                                 \
          fmt::format("internal error at {}:{}: check '{}' failed", __FILE__, __LINE__, #cond)); \
  } while (0)
