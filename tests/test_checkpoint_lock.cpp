// One run per checkpoint folder (CheckpointLock, sma/checkpoint.h): a second lock on a folder is
// refused naming the holder's pid, host and command; the lock goes with its holder (destroyed,
// or killed with SIGKILL: never stale) and is not inherited by a child process; the lock file is
// never taken for a checkpoint. End to end: a second cb-train on a running one's folder exits 1
// before reading the data and touches nothing; cb-export still reads the folder; after kill -9 of
// the first a new run resumes in that folder.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "sma/checkpoint.h"
#include "sma/train_loop.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::contains;
using test::error_of;
using test::read_text;
using test::TempDir;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";

std::string host_name() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return host;
}

// Every file under dir with its bytes: what "untouched" compares.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_text(e.path());
  return out;
}

}  // namespace

TEST_CASE("checkpoint lock: a second lock on a folder is refused, naming the holder") {
  TempDir d("lock");
  const std::string dir = d / "new/ck";  // made when missing, as checkpoints are
  std::optional<CheckpointLock> first;
  first.emplace(dir, "cb-train lenet.onnx --checkpoint-dir ck");
  CHECK(first->path() == dir + "/.lock");
  const std::string text = read_text(first->path());
  CHECK(contains(text, fmt::format("pid {} on {} since ", getpid(), host_name())));
  CHECK(contains(text, ", command: cb-train lenet.onnx --checkpoint-dir ck"));

  // flock locks are per open file description: a second lock in this process is refused too.
  const std::string e = error_of([&] { CheckpointLock second(dir, "other"); });
  CHECK(contains(e, fmt::format("checkpoint folder {} is in use by another run", dir)));
  CHECK(contains(e, fmt::format("pid {} on {}", getpid(), host_name())));
  CHECK(contains(e, "command: cb-train lenet.onnx"));
  CHECK(read_text(first->path()) == text);  // the refused one writes nothing
  // So is a policy on that folder (what cb-train constructs first).
  CheckpointOptions co;
  co.dir = dir;
  CHECK(contains(error_of([&] { CheckpointPolicy p(co, "x"); }), "is in use by another run"));

  // A moved lock is still held; destroyed, it is free, and the next holder names itself.
  CheckpointLock moved = std::move(*first);
  first.reset();
  CHECK(contains(error_of([&] { CheckpointLock again(dir, "x"); }), "in use"));
  { CheckpointLock gone = std::move(moved); }
  {
    CheckpointPolicy p(co, "the next run");
    CHECK(contains(read_text(dir + "/.lock"), "command: the next run"));
  }
  CHECK(error_of([&] { CheckpointLock free(dir, "x"); }) == "(no error)");

  // The lock file is not a checkpoint: not listed, not pruned, not loaded.
  CHECK(list_checkpoints(dir).empty());
  prune_checkpoints(dir, 1);
  CHECK(fs::exists(dir + "/.lock"));
  CHECK(contains(error_of([&] { load_checkpoint(dir); }), "no checkpoint in this folder"));
}

TEST_CASE("checkpoint lock: a child process does not inherit it") {
  TempDir d("lock_child");
  const std::string dir = d / "ck";
  std::optional<CheckpointLock> lock;
  lock.emplace(dir, "parent");
  // A child that outlives the holder (a helper the run started) must not keep the folder locked.
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Once it has exec'd (before that it holds a copy of every descriptor, as any fork does).
  for (int i = 0;
       i < 400 && read_text(fmt::format("/proc/{}/cmdline", child)).rfind("sleep", 0) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  lock.reset();
  CHECK(error_of([&] { CheckpointLock next(dir, "next"); }) == "(no error)");
  kill(child, SIGKILL);
  test::exit_status(child);
}

TEST_CASE("cb-train: one run per checkpoint folder; no stale lock after kill -9") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz", "Fashion-MNIST")) return;
  TempDir d("lock_e2e");
  const std::string ck = d / "ck";
  const std::string common = fmt::format(
      "{}/models/lenet5_op17.onnx --data {} --learners 1 --test-limit 100 --checkpoint-dir {} ",
      CB_SOURCE_DIR, kFashion, ck);
  const pid_t first =
      test::start_cb_train(common + "--steps 4000 --checkpoint-every 20", d / "first.log");
  // Wait until it holds the lock and has written a checkpoint, then freeze it so that the folder
  // can be compared before and after the second run.
  const std::string holder = fmt::format("pid {} on {} since ", first, host_name());
  for (int i = 0; i < 1200 && !(contains(read_text(ck + "/.lock"), holder) &&
                                contains(read_text(d / "first.log"), "saved "));
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(first, SIGSTOP);
  // kill() returns before the signal is delivered: wait until the kernel reports the run stopped,
  // or a checkpoint it is still writing would change the folder after the snapshot.
  int stop_status = 0;
  REQUIRE(waitpid(first, &stop_status, WUNTRACED) == first);
  REQUIRE(WIFSTOPPED(stop_status));
  INFO(read_text(d / "first.log"));
  REQUIRE(contains(read_text(ck + "/.lock"), holder));
  REQUIRE(!list_checkpoints(ck).empty());
  const auto before = snapshot(ck);

  // The second run (the same command, and one resuming into the folder) is refused at start.
  for (const std::string& extra : {std::string("--steps 400"), "--steps 400 --resume " + ck}) {
    CAPTURE(extra);
    const int rc = test::exit_status(test::start_cb_train(common + extra, d / "second.log"));
    const std::string out = read_text(d / "second.log");
    INFO(out);
    CHECK(rc == 1);
    CHECK(
        contains(out, fmt::format("cb-train: error: checkpoint folder {} is in use by another run: "
                                  "pid {} on {} since ",
                                  ck, first, host_name())));
    CHECK(contains(out, "--checkpoint-every 20"));  // the holder's command
    CHECK(!contains(out, "data     "));  // refused before the data was read (its console line)
    CHECK(snapshot(ck) == before);
  }
  // Reading needs no lock: cb-export writes the model of the held folder.
  const int rc = std::system(fmt::format("{}/cb-export {} --out {} > {} 2>&1", CB_BINARY_DIR, ck,
                                         d / "x.onnx", d / "x.log")
                                 .c_str());
  CHECK(rc == 0);
  CHECK(fs::exists(d / "x.onnx"));

  // kill -9: the kernel releases the lock; a new run resumes in the folder.
  kill(first, SIGKILL);
  CHECK(test::exit_status(first) == 128 + SIGKILL);
  const int64_t step = load_checkpoint(ck).state.loop.step;
  const pid_t next = test::start_cb_train(
      common + fmt::format("--steps {} --resume {}", step + 10, ck), d / "next.log");
  const int rc_next = test::exit_status(next);
  const std::string out = read_text(d / "next.log");
  INFO(out);
  CHECK(rc_next == 0);
  CHECK(contains(out, "resume   "));
  CHECK(contains(read_text(ck + "/.lock"), fmt::format("pid {} on ", next)));
  CHECK(load_checkpoint(ck).state.loop.step == step + 10);
}

TEST_CASE("checkpoint policy: a stream of unknown length has no epochs to checkpoint at") {
  TempDir d("unknown-length");
  CheckpointOptions co;
  co.dir = (d.path / "ck").string();
  LoopState loop;
  {  // the default 1e: every 10 minutes, not every batch
    CheckpointPolicy p(co, "x");
    p.start(loop, 0, {});
    for (int s = 1; s <= 5; ++s) {
      loop.step = loop.consumed = s;
      CHECK(!p.due(loop));
    }
  }
  {  // with a known length, the default is every epoch as before
    CheckpointPolicy p(co, "x");
    loop = {};
    p.start(loop, 4, {});
    loop.step = loop.consumed = 3;
    CHECK(!p.due(loop));
    loop.step = loop.consumed = 4;
    CHECK(p.due(loop));
  }
  co.every = "2e";  // asked for: refused, naming the forms that work
  CheckpointPolicy p(co, "x");
  CHECK(contains(error_of([&] { p.start({}, 0, {}); }),
                 "--checkpoint-every 2e: the training data is a stream of unknown length, which "
                 "has no epochs; give N (steps) or Nm (minutes)"));
}
