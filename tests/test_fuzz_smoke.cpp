// A small mutation fuzzer over the libFuzzer harnesses (tests/fuzz_targets.h), for builds without
// libFuzzer (GCC's asan preset in CI, the default build): for each target it replays the saved
// corpus (tests/fuzz_corpus/<target>/ and tests/fuzz_regressions/<target>/), then for a time
// budget runs the harness on stacked random mutations of corpus entries: bit flips, random
// bytes, inserted, deleted and duplicated ranges, copies within the input, splices of two entries,
// truncation, "interesting" integers (0, -1, 0x7fffffff, 2^32, ...) written as 1-8 byte fields in
// either byte order, integers nudged by a small delta and decimal numbers in text replaced.
// It is no substitute for tools/fuzz/run.sh (no coverage feedback): it keeps the corpus honest and
// catches what a few thousand blind mutations of it reach.
//
// Environment: CB_FUZZ_SMOKE_SECONDS (per target, default 0.4: ./test.sh; .ci/sanitizers' asan
// stage sets 20), CB_FUZZ_SMOKE_SEED (default 1; target i uses SEED + i), CB_FUZZ_SMOKE_TARGETS
// (comma-separated names, default all).
//
// Before each run the input is written to <build>/fuzz-smoke/<target>.input, so when ASan or
// UBSan abort the process (the asan preset makes every finding fatal) or it crashes or hangs,
// that file reproduces it (copy it into tests/fuzz_regressions/<target>/, or give it to
// build-fuzz/cb-fuzz-<target>). Its path is printed at the start, again when the process dies
// (ASan's death callback, UBSan's report hook, or a fatal-signal handler in plain builds), and the
// file is removed after a clean run.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz_targets.h"

#if defined(__SANITIZE_ADDRESS__)
#define CB_SMOKE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CB_SMOKE_ASAN 1
#endif
#endif
#ifdef CB_SMOKE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

double env_seconds() {
  const char* v = std::getenv("CB_FUZZ_SMOKE_SECONDS");
  return v && *v ? std::atof(v) : 0.4;
}

uint64_t env_seed() {
  const char* v = std::getenv("CB_FUZZ_SMOKE_SEED");
  return v && *v ? std::strtoull(v, nullptr, 0) : 1;
}

bool selected(const std::string& name) {
  const char* v = std::getenv("CB_FUZZ_SMOKE_TARGETS");
  if (!v || !*v) return true;
  const std::string list = std::string(",") + v + ",";
  return list.find("," + name + ",") != std::string::npos;
}

// Every file of `dir` (none when it is missing), in name order so the replay is repeatable.
void read_dir(const fs::path& dir, std::vector<Bytes>& out) {
  if (!fs::is_directory(dir)) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::ifstream f(p, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
}

// The file that holds the input being run. Written with ftruncate + pwrite on an open
// descriptor: two system calls per run, and whatever kills the process finds it written.
class InputFile {
 public:
  explicit InputFile(const fs::path& p) : path_(p.string()) {
    fs::create_directories(p.parent_path());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE_MESSAGE(fd_ >= 0, "cannot create " << path_);
  }
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  void write(const Bytes& b) {
    if (::ftruncate(fd_, 0) != 0 ||
        (!b.empty() && ::pwrite(fd_, b.data(), b.size(), 0) != static_cast<ssize_t>(b.size())))
      FAIL("cannot write " << path_ << ": " << std::strerror(errno));
  }
  // After a clean run: nothing to reproduce.
  void remove() {
    ::close(fd_);
    fd_ = -1;
    fs::remove(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// What the death callback or signal handler prints: set before each target, so it needs no
// allocation when the process is dying.
char g_dying_note[512] = "";

void print_dying_note() {
  const size_t n = std::strlen(g_dying_note);
  if (n > 0 && ::write(STDERR_FILENO, g_dying_note, n) < 0) {
  }
}

}  // namespace

// UBSan's hook before each report (GCC links UBSan as a runtime of its own, which does not call
// ASan's death callback); a weak symbol in the runtime, unused without it.
extern "C" void __ubsan_on_report() { print_dying_note(); }

namespace {

#ifndef CB_SMOKE_ASAN
// Plain builds: on a fatal signal print the note, then hand the signal to whoever had it before
// (doctest's reporter) and re-raise.
const int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[std::size(kFatalSignals)];

void on_fatal_signal(int sig) {
  print_dying_note();
  for (size_t i = 0; i < std::size(kFatalSignals); ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  raise(sig);
}
#endif

// Installs the note printer for the lifetime of one test case.
struct DyingNote {
  DyingNote() {
#ifdef CB_SMOKE_ASAN
    __sanitizer_set_death_callback(print_dying_note);
#else
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK;
    for (size_t i = 0; i < std::size(kFatalSignals); ++i)
      sigaction(kFatalSignals[i], &sa, &g_previous[i]);
#endif
  }
  ~DyingNote() {
#ifdef CB_SMOKE_ASAN
    __sanitizer_set_death_callback(nullptr);
#else
    for (size_t i = 0; i < std::size(kFatalSignals); ++i)
      sigaction(kFatalSignals[i], &g_previous[i], nullptr);
#endif
    g_dying_note[0] = '\0';
  }
};

// Values that sit on the edges of field widths and signedness, for binary fields and text.
// clang-format off
constexpr uint64_t kInterestingInts[] = {
    0, 1, 2, 3, 7, 8, 16, 64, 127, 128, 255, 256, 1024, 4096, 32767, 32768, 65535, 65536,
    0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x100000000ull, 0x7fffffffffffffffull,
    0x8000000000000000ull, ~0ull - 1, ~0ull};
const char* const kInterestingDecimals[] = {
    "0", "1", "-1", "2147483647", "2147483648", "4294967296", "-2147483649",
    "9223372036854775807", "18446744073709551616", "99999999999999999999"};
// clang-format on

// Stacked random edits of one corpus entry, never longer than max_len.
class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Bytes>& corpus, size_t max_len)
      : rng_(seed), corpus_(corpus), max_len_(max_len) {}

  Bytes next() {
    Bytes b = corpus_[below(corpus_.size())];
    const int edits = 1 + static_cast<int>(below(4));
    for (int i = 0; i < edits; ++i) edit(b);
    if (b.size() > max_len_) b.resize(max_len_);
    return b;
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  // A range [pos, pos + len) of `b`: short most of the time, sometimes up to the whole input.
  size_t span(size_t n) { return 1 + below(below(8) == 0 ? n : std::min<size_t>(n, 32)); }

  void edit(Bytes& b) {
    switch (below(11)) {
      case 0:  // flip one bit
        if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << below(8));
        break;
      case 1:  // random bytes
        for (size_t k = 0, n = 1 + below(4); k < n && !b.empty(); ++k)
          b[below(b.size())] = static_cast<uint8_t>(rng_());
        break;
      case 2: {  // insert random bytes, or one repeated byte
        const size_t pos = below(b.size() + 1), n = span(64);
        Bytes ins(n);
        const bool same = below(2) == 0;
        const auto v = static_cast<uint8_t>(rng_());
        for (uint8_t& c : ins) c = same ? v : static_cast<uint8_t>(rng_());
        b.insert(b.begin() + static_cast<ptrdiff_t>(pos), ins.begin(), ins.end());
        break;
      }
      case 3: {  // delete a range
        if (b.empty()) break;
        const size_t pos = below(b.size()), n = std::min(span(b.size()), b.size() - pos);
        b.erase(b.begin() + static_cast<ptrdiff_t>(pos),
                b.begin() + static_cast<ptrdiff_t>(pos + n));
        break;
      }
      case 4: {  // duplicate a range somewhere
        if (b.empty()) break;
        const size_t from = below(b.size()), n = std::min(span(b.size()), b.size() - from);
        const Bytes piece(b.begin() + static_cast<ptrdiff_t>(from),
                          b.begin() + static_cast<ptrdiff_t>(from + n));
        b.insert(b.begin() + static_cast<ptrdiff_t>(below(b.size() + 1)), piece.begin(),
                 piece.end());
        break;
      }
      case 5: {  // copy a range over another place
        if (b.size() < 2) break;
        const size_t from = below(b.size()), to = below(b.size());
        const size_t n = std::min({span(b.size()), b.size() - from, b.size() - to});
        std::memmove(b.data() + to, b.data() + from, n);
        break;
      }
      case 6: {  // splice: this entry's head, another's tail; or a piece of another inserted
        const Bytes& o = corpus_[below(corpus_.size())];
        if (o.empty()) break;
        if (below(2) == 0) {
          b.resize(below(b.size() + 1));
          b.insert(b.end(), o.begin() + static_cast<ptrdiff_t>(below(o.size())), o.end());
        } else {
          const size_t from = below(o.size()), n = std::min(span(o.size()), o.size() - from);
          b.insert(b.begin() + static_cast<ptrdiff_t>(below(b.size() + 1)),
                   o.begin() + static_cast<ptrdiff_t>(from),
                   o.begin() + static_cast<ptrdiff_t>(from + n));
        }
        break;
      }
      case 7:  // truncate
        b.resize(below(b.size() + 1));
        break;
      case 8: {  // an interesting integer as a 1, 2, 4 or 8 byte field, either byte order
        const size_t w = size_t{1} << below(4);
        if (b.size() < w) break;
        const uint64_t v = kInterestingInts[below(std::size(kInterestingInts))];
        put_int(b, below(b.size() - w + 1), w, v, below(2) == 0);
        break;
      }
      case 9: {  // nudge an integer field by a small delta (a size off by a few)
        const size_t w = size_t{1} << below(4);
        if (b.size() < w) break;
        const size_t pos = below(b.size() - w + 1);
        const bool be = below(2) == 0;
        uint64_t v = 0;
        for (size_t k = 0; k < w; ++k) v |= uint64_t{b[pos + (be ? w - 1 - k : k)]} << (8 * k);
        v += static_cast<uint64_t>(static_cast<int64_t>(below(33)) - 16);
        put_int(b, pos, w, v, be);
        break;
      }
      default: {  // a decimal number in text (MANIFEST fields, .npy headers) replaced
        std::vector<size_t> starts;
        for (size_t k = 0; k < b.size(); ++k)
          if (b[k] >= '0' && b[k] <= '9' && (k == 0 || b[k - 1] < '0' || b[k - 1] > '9'))
            starts.push_back(k);
        if (starts.empty()) break;
        const size_t s = starts[below(starts.size())];
        size_t e = s;
        while (e < b.size() && b[e] >= '0' && b[e] <= '9') ++e;
        const std::string r = below(2) == 0
                                  ? kInterestingDecimals[below(std::size(kInterestingDecimals))]
                                  : std::to_string(rng_() >> below(64));
        b.erase(b.begin() + static_cast<ptrdiff_t>(s), b.begin() + static_cast<ptrdiff_t>(e));
        b.insert(b.begin() + static_cast<ptrdiff_t>(s), r.begin(), r.end());
        break;
      }
    }
  }

  static void put_int(Bytes& b, size_t pos, size_t w, uint64_t v, bool big_endian) {
    for (size_t k = 0; k < w; ++k)
      b[pos + (big_endian ? w - 1 - k : k)] = static_cast<uint8_t>(v >> (8 * k));
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>& corpus_;
  size_t max_len_;
};

}  // namespace

TEST_CASE("fuzz smoke: the saved corpus and its random mutations through every harness") {
  using Clock = std::chrono::steady_clock;
  const fs::path src = fs::path(CB_SOURCE_DIR) / "tests";
  const double seconds = env_seconds();
  const uint64_t seed = env_seed();
  DyingNote note;
  for (size_t t = 0; t < std::size(cb::test::kFuzzTargets); ++t) {
    const std::string name = cb::test::kFuzzTargets[t].name;
    const auto fn = cb::test::kFuzzTargets[t].fn;
    if (!selected(name)) continue;
    CAPTURE(name);
    std::vector<Bytes> corpus;
    read_dir(src / "fuzz_corpus" / name, corpus);
    const size_t saved = corpus.size();
    read_dir(src / "fuzz_regressions" / name, corpus);
    CHECK_MESSAGE(saved > 0, "no saved corpus in tests/fuzz_corpus/" << name);
    if (corpus.empty()) continue;
    size_t longest = 0;
    for (const Bytes& b : corpus) longest = std::max(longest, b.size());

    InputFile input(fs::path(CB_BINARY_DIR) / "fuzz-smoke" / (name + ".input"));
    const uint64_t target_seed = seed + t;
    fmt::print(
        "fuzz smoke: {}: {} corpus files, {:.1f} s of mutations, seed {} "
        "(CB_FUZZ_SMOKE_SEED={}); each input is written to {} before it runs\n",
        name, corpus.size(), seconds, target_seed, seed, input.path());
    std::fflush(stdout);
    std::snprintf(g_dying_note, sizeof g_dying_note,
                  "\nfuzz smoke: the input that failed (%s, seed %llu) is in %s\n", name.c_str(),
                  static_cast<unsigned long long>(target_seed), input.path().c_str());

    // One run; false (and the test fails) when something other than cb::Error escapes.
    size_t runs = 0;
    auto run = [&](const Bytes& b) {
      input.write(b);
      ++runs;
      try {
        fn(b.data(), b.size());
        return true;
      } catch (const std::exception& e) {
        FAIL_CHECK(name << ": an exception escaped the harness: " << e.what()
                        << "; the input is in " << input.path());
      } catch (...) {
        FAIL_CHECK(name << ": a non-standard exception escaped the harness; the input is in "
                        << input.path());
      }
      return false;
    };

    bool clean = true;
    for (size_t i = 0; i < corpus.size() && clean; ++i) clean = run(corpus[i]);
    Mutator mutate(target_seed, corpus, std::max<size_t>(longest + 4096, 64 << 10));
    const auto start = Clock::now();
    const auto budget = std::chrono::duration<double>(seconds);
    while (clean && Clock::now() - start < budget) clean = run(mutate.next());
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    fmt::print("fuzz smoke: {}: {} runs ({} mutated) in {:.1f} s{}\n", name, runs,
               runs - corpus.size(), took, clean ? "" : ", FAILED");
    std::fflush(stdout);
    if (clean) input.remove();
  }
}
