// Small helpers shared by the test files: the message of the cb::Error a call throws, a substring
// check for asserting on it, need() for inputs that live outside the repository or are generated
// by setup.sh, a temporary folder per test, reading a file whole, and moving values between the
// plain and the blocked layout.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/error.h"

namespace cb::test {

// Whether this build runs under AddressSanitizer or ThreadSanitizer (.ci/sanitizers). Suites that
// train to an accuracy bar run a short version there: the sanitizer checks the code paths, the
// Release build checks the accuracy, and a sanitizer's 3-5x slowdown on minutes of training is
// what would push CI past its time.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

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

// Whether the input `p` a test needs is there; `what` says what it is and how to get it, e.g.
// "Fashion-MNIST (apt-get install dataset-fashion-mnist; ./setup.sh installs it)". When it is
// missing: with the environment variable CI set (to anything non-empty; .ci/run sets it) the test
// fails, naming the path; otherwise a skip message is printed. Either way it returns false and
// the caller skips what needs `p`:   if (!test::need(path, "...")) return;
// Reported at the caller's file:line.
inline bool need(const std::filesystem::path& p, std::string_view what,
                 const std::source_location& at = std::source_location::current()) {
  if (std::filesystem::exists(p)) return true;
  const std::string msg = "missing " + p.string() + ": " + std::string(what);
  const char* ci = std::getenv("CI");
  if (ci && *ci) {
    ADD_FAIL_CHECK_AT(at.file_name(), static_cast<int>(at.line()),
                      (msg + " (CI is set: a missing input fails instead of skipping)"));
  } else {
    ADD_MESSAGE_AT(at.file_name(), static_cast<int>(at.line()),
                   ("skipped: " + msg + " (with CI set this fails)"));
  }
  return false;
}

// A fresh folder for one test, cb_test_<tag>_<pid> in the temporary folder, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / fmt::format("cb_test_{}_{}", tag, getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& f) const { return (path / f).string(); }
  std::string str() const { return path.string(); }
};

// [N, C, S] plain -> oneDNN's blocked [N, C/16, S, 16] (TensorView::blocked), and back.
inline size_t blocked_index(int64_t i, int64_t ch, int64_t p, int64_t c, int64_t s) {
  return static_cast<size_t>(((i * (c / 16) + ch / 16) * s + p) * 16 + ch % 16);
}
template <class T>
std::vector<T> to_blocked(const std::vector<T>& x, int64_t n, int64_t c, int64_t s) {
  std::vector<T> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < s; ++p)
        y[blocked_index(i, ch, p, c, s)] = x[static_cast<size_t>((i * c + ch) * s + p)];
  return y;
}
template <class T>
std::vector<T> from_blocked(const std::vector<T>& y, int64_t n, int64_t c, int64_t s) {
  std::vector<T> x(y.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < s; ++p)
        x[static_cast<size_t>((i * c + ch) * s + p)] = y[blocked_index(i, ch, p, c, s)];
  return x;
}

// A file's whole contents ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// The image examples behind a loaded split (IDX, CIFAR, folders, packs); fails the test for
// arrays.
inline const Examples& images(const std::shared_ptr<const Source>& s) {
  const auto* e = dynamic_cast<const Examples*>(s.get());
  REQUIRE(e != nullptr);
  return *e;
}

// The in-memory set behind a loaded split (IDX, CIFAR); fails the test for any other kind.
inline const ImageSet& mem(const std::shared_ptr<const Source>& e) {
  const auto* s = dynamic_cast<const ImageSet*>(e.get());
  REQUIRE(s != nullptr);
  return *s;
}

// cb-train started in the background with `args` (exec'd: the pid is cb-train's own), its stdout
// and stderr in `log`; exit_status() waits for it.
inline pid_t start_cb_train(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = fmt::format("exec {}/cb-train {} > {} 2>&1", CB_BINARY_DIR, args, log);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}
// Waits for `pid`: its exit code, or 128 + the signal that ended it.
inline int exit_status(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace cb::test
