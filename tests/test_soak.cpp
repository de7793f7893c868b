// Soak tests of cb-train's checkpoints with real processes, many cycles each:
//  - SIGTERM at varied moments (after a number of "saved" lines, after a random delay from the
//    start, at a random moment after a checkpoint), each run exiting 143 and the next one taking
//    --resume DIR: the final --output is the bytes of an uninterrupted run's;
//  - SIGKILL at random moments of runs that write a checkpoint after every step (most kills land
//    in a checkpoint write or a prune): the newest checkpoint always loads, --resume always
//    continues, cb-export reads the folder, and the resumed run still ends with the bytes of the
//    uninterrupted one.
// Each next run starts only after the previous process was reaped (the kernel has then released
// the folder's lock). The moments are drawn from a seed that is printed; CB_SOAK_SEED=N draws the
// same ones again (the machine's timing still varies). The fast version (CI) runs 3 learners of
// the tabular regressor of tests/tensor_models.py; CB_SOAK_LONG=1 (tools/soak.sh) runs many more
// cycles on LeNet-5 and Fashion-MNIST. CB_SOAK_TERM_CYCLES and CB_SOAK_KILLS override the counts.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sma/checkpoint.h"
#include "tests/test_util.h"

extern char** environ;

using namespace cb;
namespace fs = std::filesystem;
using test::contains;
using test::read_text;
using test::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kPython = "/usr/bin/python3";
const char* const kFashion = "/usr/share/datasets/fashion-mnist";

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
bool long_mode() { return env_int("CB_SOAK_LONG", 0) != 0; }

uint64_t seed() {
  const char* v = std::getenv("CB_SOAK_SEED");
  return v && *v ? std::strtoull(v, nullptr, 10) : std::random_device{}();
}

// How a process ended: its exit status, or the signal that ended it.
struct Ended {
  bool signaled = false;
  int code = 0;  // exit status or signal number
  bool exited(int c) const { return !signaled && code == c; }
  bool killed_by(int s) const { return signaled && code == s; }
  std::string str() const {
    return signaled ? fmt::format("killed by signal {}", code) : fmt::format("exit {}", code);
  }
};

Ended decode(int status) {
  if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
  return {false, WEXITSTATUS(status)};
}

// A program run directly (posix_spawn, no shell: the pid is the program's own), its stdout and
// stderr into `log`.
struct Child {
  pid_t pid = -1;
  std::string log;
  Clock::time_point started;
};

Child spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);  // dup2 clears O_CLOEXEC on 1 and 2
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  Child c;
  c.log = log;
  c.started = Clock::now();
  const int rc = posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  REQUIRE_MESSAGE(rc == 0, "cannot start " << args[0] << ": " << std::strerror(rc));
  return c;
}

// Waits for the process to end (it is reaped: its pid, and any lock it held, are gone).
Ended reap(const Child& c) {
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0) REQUIRE(errno == EINTR);
  return decode(status);
}

// Whether the process has ended (reaping it if so).
std::optional<Ended> ended(const Child& c) {
  int status = 0;
  const pid_t r = waitpid(c.pid, &status, WNOHANG);
  REQUIRE(r >= 0);
  if (r == 0) return std::nullopt;
  return decode(status);
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

// Waits until the child's log holds `n` lines "saved    ..." (a checkpoint written), `until` has
// passed, or the child has ended (returned then, reaped).
std::optional<Ended> wait_saved(const Child& c, int n, Clock::time_point until) {
  for (;;) {
    if (auto e = ended(c)) return e;
    if (Clock::now() >= until || (n > 0 && count_of(read_text(c.log), "saved    ") >= n)) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Ended run_to_end(const std::vector<std::string>& args, const std::string& log) {
  return reap(spawn(args, log));
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The run under test: cb-train and its flags without --steps, the checkpoint flags and --output.
struct Setup {
  std::string what;
  std::vector<std::string> train;
  int term_cycles = 0;         // SIGTERMs
  int64_t term_steps_per = 0;  // --steps of the SIGTERM soak per cycle: more than one run makes
  int term_every = 0;          // its --checkpoint-every
  int term_delay_ms = 0;       // the longest random delay before a SIGTERM
  int kills = 0;               // SIGKILLs
  int64_t kill_steps_per = 0;  // --steps of the SIGKILL soak (a checkpoint every step) per kill
  int kill_delay_ms = 0;       // the longest random delay before a SIGKILL
  int64_t term_steps() const { return term_cycles * term_steps_per; }
  int64_t kill_steps() const { return kills * kill_steps_per; }
};

// The fast setup: 3 learners of the regressor of tests/tensor_models.py (an MLP 4 -> 64 -> 64 -> 1,
// a step takes well under a millisecond); the long one: 3 learners of LeNet-5 on Fashion-MNIST.
// nullopt (skipped, or failed under CI) when an input is missing.
std::optional<Setup> make_setup(const TempDir& d) {
  Setup s;
  const std::string bin = fmt::format("{}/cb-train", CB_BINARY_DIR);
  if (long_mode()) {
    if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", "Fashion-MNIST")) return {};
    s.what = "LeNet-5 on Fashion-MNIST, 3 learners";
    s.train = {bin,
               CB_SOURCE_DIR "/models/lenet5_op17.onnx",
               "--data",
               kFashion,
               "--learners",
               "3",
               "--threads",
               "2",
               "--test-limit",
               "200",
               "--eval-every",
               "400"};
    // ~1.5 ms a step, ~10 with a checkpoint, ~1 s start-up.
    s.term_cycles = 100, s.term_steps_per = 600, s.term_every = 25, s.term_delay_ms = 2500;
    s.kills = 200, s.kill_steps_per = 25, s.kill_delay_ms = 1500;
  } else {
    if (!test::need(kPython,
                    "Debian's python3 with numpy and torch (apt-get install python3-torch)"))
      return {};
    const std::string cmd = fmt::format("{} {}/tests/tensor_models.py regressor {} > {} 2>&1",
                                        kPython, CB_SOURCE_DIR, d.str(), d / "make.log");
    INFO(read_text(d / "make.log"));
    REQUIRE(std::system(cmd.c_str()) == 0);
    s.what = "the tabular regressor, 3 learners";
    s.train = {bin,
               d / "model.onnx",
               "--data",
               d.str(),
               "--loss",
               "mse",
               "--lr",
               "0.01",
               "--learners",
               "3",
               "--batch-size",
               "16",
               "--threads",
               "2",
               "--eval-every",
               "500"};
    // ~0.4 ms a step, ~17 ms a checkpoint (fsync), ~0.1 s start-up.
    s.term_cycles = 10, s.term_steps_per = 1200, s.term_every = 50, s.term_delay_ms = 400;
    s.kills = 20, s.kill_steps_per = 25, s.kill_delay_ms = 800;
  }
  s.term_cycles = env_int("CB_SOAK_TERM_CYCLES", s.term_cycles);
  s.kills = env_int("CB_SOAK_KILLS", s.kills);
  return s;
}

// The step of the newest complete checkpoint in dir (-1: none).
int64_t newest_step(const std::string& dir) {
  const std::vector<std::string> all = list_checkpoints(dir);
  return all.empty() ? -1 : std::stoll(fs::path(all.back()).filename().string().substr(5));
}

// Temporary (half-written) checkpoint folders in dir; none where a run killed during start-up
// never made dir.
int tmp_folders(const std::string& dir) {
  int n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".tmp") ++n;
  return n;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE(
    "soak: SIGTERM at varied moments, --resume, again and again: an uninterrupted run's bytes") {
  TempDir d("soak_term");
  const auto setup = make_setup(d);
  if (!setup) return;
  const Setup& s = *setup;
  const uint64_t sd = seed();
  MESSAGE("SIGTERM soak: " << s.what << ", " << s.term_cycles << " cycles, seed " << sd
                           << " (CB_SOAK_SEED=" << sd << " draws the same moments)");
  std::mt19937_64 rng(sd);
  const auto t0 = Clock::now();
  const std::vector<std::string> steps = {"--steps", std::to_string(s.term_steps())};

  // The reference: one run, no checkpoints at all.
  Ended e = run_to_end(s.train + steps + std::vector<std::string>{"--output", d / "whole.onnx"},
                       d / "whole.log");
  INFO(read_text(d / "whole.log"));
  REQUIRE(e.exited(0));
  const double whole_s = seconds_since(t0);

  const std::string ck = d / "ck";
  const std::vector<std::string> run =
      s.train + steps +
      std::vector<std::string>{
          "--checkpoint-dir",           ck,         "--checkpoint-every",
          std::to_string(s.term_every), "--output", d / "out.onnx",
      };
  int64_t last = -1;  // the step the last stopped run reached
  int stopped = 0, early = 0;
  std::string stops;
  for (int i = 0; i < s.term_cycles; ++i) {
    const bool resume = newest_step(ck) >= 0;
    const std::string log = d / fmt::format("term{}.log", i);
    const Child c = spawn(resume ? run + std::vector<std::string>{"--resume", ck} : run, log);
    // When: after 1-3 checkpoints of this run; after a random delay from its start (start-up,
    // reading the data and the checkpoint included); or at a random moment after its first
    // checkpoint (within a step, a checkpoint write or a prune).
    const int how = static_cast<int>(rng() % 3);
    const auto forever = Clock::now() + std::chrono::minutes(5);
    const int delay_ms = static_cast<int>(rng() % static_cast<uint64_t>(s.term_delay_ms));
    std::optional<Ended> early_end;
    if (how == 0) {
      early_end = wait_saved(c, 1 + static_cast<int>(rng() % 3), forever);
    } else if (how == 1) {  // half of these within the first tenth: start-up, mostly
      const int ms = rng() % 2 ? delay_ms : delay_ms / 10;
      early_end = wait_saved(c, 0, c.started + std::chrono::milliseconds(ms));
    } else {
      early_end = wait_saved(c, 1, forever);
      if (!early_end)
        early_end = wait_saved(c, 0, Clock::now() + std::chrono::milliseconds(delay_ms / 8));
    }
    std::string text = read_text(log);
    INFO("cycle " << i << " (trigger " << how << ", delay " << delay_ms << " ms): " << text);
    REQUIRE_MESSAGE(!early_end,
                    "the run ended before its SIGTERM: " << (early_end ? early_end->str() : "")
                                                         << " (--steps too few?)");
    REQUIRE(kill(c.pid, SIGTERM) == 0);
    e = reap(c);
    text = read_text(log);
    if (e.killed_by(SIGTERM)) {
      // Before the handlers are installed (start-up: reading the model, the data, the
      // checkpoint) SIGTERM ends the process at once: nothing was trained, nothing is written.
      CHECK(!contains(text, "saved    "));
      CHECK(newest_step(ck) == last);
      ++early;
      continue;
    }
    REQUIRE_MESSAGE(e.exited(128 + SIGTERM), e.str());
    // It says where it stopped, and its final checkpoint is that step.
    const size_t at = text.find("stopped by SIGTERM after step ");
    REQUIRE(at != std::string::npos);
    const int64_t step = std::stoll(text.substr(at + 30));
    CHECK(contains(text, "continue with --resume " + ck));
    CHECK(newest_step(ck) == step);
    CHECK(step > last);
    CHECK(step < s.term_steps());
    CHECK(tmp_folders(ck) == 0);
    if (resume) CHECK(contains(text, "resume   " + ck + "/ckpt-"));
    last = step;
    ++stopped;
    stops += fmt::format(" {}", step);
  }
  // The last run goes to the end: exit 0 and the bytes of the uninterrupted run.
  REQUIRE(last >= 0);  // at least one run was stopped, not ended in its start-up
  e = run_to_end(run + std::vector<std::string>{"--resume", ck}, d / "last.log");
  INFO(read_text(d / "last.log"));
  REQUIRE(e.exited(0));
  CHECK(contains(read_text(d / "last.log"), fmt::format("resume   {}/ckpt-{:010d}", ck, last)));
  CHECK(read_text(d / "out.onnx") == read_text(d / "whole.onnx"));
  CHECK(stopped + early == s.term_cycles);
  MESSAGE("SIGTERM soak: " << stopped << " stopped at steps" << stops << ", " << early
                           << " during start-up; uninterrupted run "
                           << fmt::format("{:.1f}", whole_s) << " s, all "
                           << fmt::format("{:.1f}", seconds_since(t0)) << " s");
}

TEST_CASE("soak: SIGKILL at random moments of checkpoint writes: the newest checkpoint loads") {
  TempDir d("soak_kill");
  const auto setup = make_setup(d);
  if (!setup) return;
  const Setup& s = *setup;
  const uint64_t sd = seed();
  MESSAGE("SIGKILL soak: " << s.what << ", " << s.kills << " kills, seed " << sd
                           << " (CB_SOAK_SEED=" << sd << " draws the same moments)");
  std::mt19937_64 rng(sd);
  const auto t0 = Clock::now();
  const std::vector<std::string> steps = {"--steps", std::to_string(s.kill_steps())};
  Ended e = run_to_end(s.train + steps + std::vector<std::string>{"--output", d / "whole.onnx"},
                       d / "whole.log");
  INFO(read_text(d / "whole.log"));
  REQUIRE(e.exited(0));

  const std::string ck = d / "ck";
  const std::vector<std::string> run =
      s.train + steps +
      std::vector<std::string>{"--checkpoint-dir", ck,  "--checkpoint-every", "1",
                               "--keep",           "2", "--output",           d / "out.onnx"};
  int64_t last = -1;  // the newest checkpoint's step after the last kill
  int mid_write = 0, finished = 0;
  for (int i = 0; i < s.kills; ++i) {
    const bool resume = newest_step(ck) >= 0;
    const std::string log = d / fmt::format("kill{}.log", i);
    const Child c = spawn(resume ? run + std::vector<std::string>{"--resume", ck} : run, log);
    // Mostly a random moment after the run's first checkpoint (each step writes one, so the
    // process is in a write or a prune most of the time); one kill in four at a random delay
    // from the start, start-up and resuming included.
    const int delay_ms = static_cast<int>(rng() % static_cast<uint64_t>(s.kill_delay_ms));
    std::optional<Ended> early_end;
    if (rng() % 4 == 0) {
      early_end = wait_saved(c, 0, c.started + std::chrono::milliseconds(delay_ms));
    } else {
      early_end = wait_saved(c, 1, Clock::now() + std::chrono::minutes(5));
      if (!early_end)
        early_end = wait_saved(c, 0, Clock::now() + std::chrono::milliseconds(delay_ms / 8));
    }
    if (!early_end) REQUIRE(kill(c.pid, SIGKILL) == 0);
    e = early_end ? *early_end : reap(c);
    const std::string text = read_text(log);
    INFO("kill " << i << " (delay " << delay_ms << " ms): " << text);
    // Killed, or finished before the kill (a later run then resumes a finished run).
    REQUIRE_MESSAGE((e.killed_by(SIGKILL) || e.exited(0)), e.str());
    if (e.exited(0)) ++finished;
    CHECK(!contains(text, ": error: "));  // the lock was free, the checkpoint valid
    if (tmp_folders(ck) > 0) ++mid_write;

    // The newest complete checkpoint loads as it is, the folder's choice is that one, and no
    // checkpoint that was complete before was lost.
    const std::vector<std::string> all = list_checkpoints(ck);
    if (all.empty()) {
      CHECK(last == -1);
      continue;
    }
    CHECK(test::error_of([&] { load_checkpoint(all.back()); }) == "(no error)");
    LoadedCheckpoint loaded;
    CHECK_NOTHROW(loaded = load_checkpoint(ck));
    CHECK(loaded.path == all.back());
    CHECK(loaded.refused.empty());
    CHECK(newest_step(ck) >= last);
    last = newest_step(ck);
    // cb-export reads the folder (a separate process, as a user would).
    const std::string exp = d / "export.log";
    e = run_to_end({fmt::format("{}/cb-export", CB_BINARY_DIR), ck, "--out", d / "x.onnx"}, exp);
    INFO(read_text(exp));
    CHECK(e.exited(0));
  }
  // --resume continues to the end: exit 0, and the bytes of the uninterrupted run.
  REQUIRE(last >= 0);  // at least one checkpoint was written
  e = run_to_end(run + std::vector<std::string>{"--resume", ck}, d / "last.log");
  INFO(read_text(d / "last.log"));
  REQUIRE(e.exited(0));
  CHECK(read_text(d / "out.onnx") == read_text(d / "whole.onnx"));
  CHECK(run_to_end({fmt::format("{}/cb-export", CB_BINARY_DIR), ck, "--out", d / "x.onnx"},
                   d / "export.log")
            .exited(0));
  // Once more, resumed at its end (what a run killed after its last checkpoint leaves): it trains
  // nothing, writes its last checkpoint again (over the one there) and still writes --output.
  std::vector<std::string> at_end = run;
  at_end.back() = d / "at_end.onnx";  // --output's value
  e = run_to_end(at_end + std::vector<std::string>{"--resume", ck}, d / "at_end.log");
  INFO(read_text(d / "at_end.log"));
  REQUIRE(e.exited(0));
  CHECK(read_text(d / "at_end.onnx") == read_text(d / "whole.onnx"));
  CHECK(load_checkpoint(ck).state.loop.step == s.kill_steps());
  CHECK(tmp_folders(ck) == 0);
  MESSAGE("SIGKILL soak: " << s.kills << " kills, " << mid_write
                           << " left a checkpoint half-written (.tmp), " << finished
                           << " runs finished before their kill; newest checkpoint at step " << last
                           << "; " << fmt::format("{:.1f}", seconds_since(t0)) << " s");
}
