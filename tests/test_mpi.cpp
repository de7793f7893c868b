// cb-train under mpirun (sma/mpi_job.h): two processes with one learner each keep z bit-identical
// and train the same weights as one process with two learners, bit for bit, and two processes
// with two devices each as one process with four; checkpoints are written in parts and resumed
// on the same or another layout, a bad part refused; each rank decodes its own learners' images;
// --cache is packed once; ranks that disagree are refused
// before the first step, naming the difference; a rank killed, or stopped, ends the whole job
// within the timeout with a message naming it; SIGTERM stops every rank after the same step.
// Needs OpenMPI (./setup.sh installs libopenmpi-dev and openmpi-bin) and Fashion-MNIST.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "importer/onnx_importer.h"
#include "kernels/cuda/cuda_device.h"
#include "sma/checkpoint.h"
#include "sma/mpi_job.h"
#include "tests/fashion_folder.h"
#include "tests/test_util.h"

using namespace cb;
using test::contains;
namespace fs = std::filesystem;
using test::read_text;
using test::TempDir;
using test::write_fashion_folder;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";

// An ASan build of cb-train: LeakSanitizer reports OpenMPI's own allocations at each rank's exit;
// tests/lsan.supp suppresses MPI's libraries only (suppressions the caller's LSAN_OPTIONS name,
// such as the asan preset's, are kept). Its patterns match only with whole allocation stacks,
// hence fast_unwind_on_malloc=0 (why: tests/lsan.supp). The ranks mpirun starts on this machine
// inherit this environment; this process read its own options at start. No effect without ASan.
void suppress_mpi_leaks() {
  const char* set = std::getenv("LSAN_OPTIONS");
  std::string v = set ? set : "";
  if (v.find("suppressions=") == std::string::npos)
    v += (v.empty() ? "" : ":") + std::string("suppressions=" CB_SOURCE_DIR "/tests/lsan.supp");
  if (v.find("fast_unwind_on_malloc=") == std::string::npos) v += ":fast_unwind_on_malloc=0";
  setenv("LSAN_OPTIONS", v.c_str(), 1);
}

// Whether MPI tests can run: a crossbow built with MPI and mpirun. Root needs OpenMPI's consent.
bool have_mpi() {
  if (!built_with_mpi()) {
    test::need("/nonexistent/crossbow-built-with-mpi",
               "a crossbow built with MPI (./setup.sh installs libopenmpi-dev and openmpi-bin)");
    return false;
  }
  if (!test::need("/usr/bin/mpirun", "OpenMPI's mpirun (./setup.sh installs openmpi-bin)"))
    return false;
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return false;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);  // 2 ranks on 2 cores, threads besides
  suppress_mpi_leaks();
  return true;
}

std::string cb_train() { return std::string(CB_BINARY_DIR) + "/cb-train"; }

std::string common(const std::string& extra, int threads = 1) {
  return fmt::format(
      "{}/models/lenet5_op17.onnx --data {} --threads {} --test-limit 200 --seed 1 {}",
      CB_SOURCE_DIR, kFashion, threads, extra);
}

int run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// mpirun in the background, its output in `log`.
pid_t start(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd = fmt::format("exec mpirun {} > {} 2>&1", args, log);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for `pid` up to `seconds`; its exit status, or -1 (then it is killed).
int finish(pid_t pid, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The pid rank `rank` printed at start ("cb-train (rank R of N): pid P on HOST"), once it has.
pid_t rank_pid(const std::string& log, int rank) {
  const std::regex re(fmt::format(R"(rank {} of \d+\): pid (\d+))", rank));
  for (int i = 0; i < 600; ++i) {
    std::smatch m;
    const std::string text = read_text(log);
    if (std::regex_search(text, m, re)) return static_cast<pid_t>(std::stol(m[1]));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

// Whether two exported models hold the same parameter bytes; the number of tensors compared.
int same_weights(const fs::path& a_path, const fs::path& b_path) {
  ImportResult a = import_model(a_path), b = import_model(b_path);
  int compared = 0;
  for (const Value& va : a.graph.values) {
    if (va.kind != ValueKind::Parameter || !va.data) continue;
    const Value* vb = nullptr;
    for (const Value& v : b.graph.values)
      if (v.name == va.name) vb = &v;
    REQUIRE(vb != nullptr);
    CAPTURE(va.name);
    CHECK(va.data->bytes == vb->data->bytes);
    ++compared;
  }
  return compared;
}

// The train loss of the last evaluation line ("train loss 2.2840").
std::string last_train_loss(const std::string& out) {
  std::string last;
  const std::regex re(R"(train loss (\S+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    last = (*it)[1];
  return last;
}

void wait_for_text(const std::string& log, const std::string& text) {
  for (int i = 0; i < 1200 && !contains(read_text(log), text); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// A 2-rank job of `args` writing checkpoints to dir/ck every `every` steps and its model to
// dir/a.onnx, stopped by SIGTERM to mpirun once the log names checkpoint `when`: its log.
std::string sigterm_after(const test::TempDir& dir, const std::string& args, int every,
                          const std::string& when) {
  const std::string log = dir / "a.log";
  const pid_t job = start(fmt::format("-np 2 --bind-to none {} {} --learners 1 --checkpoint-dir {} "
                                      "--checkpoint-every {} --output {}",
                                      cb_train(), args, dir / "ck", every, dir / "a.onnx"),
                          log);
  wait_for_text(log, when);
  kill(job, SIGTERM);
  finish(job, 120);
  return read_text(log);
}

}  // namespace

TEST_CASE("mpi: 2 ranks x 1 learner keep z identical and equal 1 rank x 2 learners") {
  if (!have_mpi()) return;
  TempDir d("same");
  const std::string args = "--steps 60 --eval-every 30 --learners 1";
  REQUIRE(run(fmt::format("mpirun -np 2 {} {} --output {} > {} 2> {}", cb_train(), common(args),
                          d / "two.onnx", d / "out", d / "err")) == 0);
  const std::string out = read_text(d / "out"), err = read_text(d / "err");
  INFO(out);
  INFO(err);
  CHECK(contains(out, "ranks    2 processes (mpirun)"));
  CHECK(contains(out, "z identical on all 2 ranks"));
  // Each rank printed its z's hash: the same.
  std::smatch m0, m1;
  REQUIRE(std::regex_search(err, m0, std::regex(R"(rank 0 of 2\): z fnv1a ([0-9a-f]+))")));
  REQUIRE(std::regex_search(err, m1, std::regex(R"(rank 1 of 2\): z fnv1a ([0-9a-f]+))")));
  CHECK(m0[1] == m1[1]);
  CHECK(contains(out, "learners 2"));  // K counts every rank's learners
  // One process with two learners, the same data order: the same weights, bit for bit.
  REQUIRE(run(fmt::format("{} {} --output {} > {} 2>&1", cb_train(),
                          common("--steps 60 --eval-every 30 --learners 2"), d / "one.onnx",
                          d / "one.out")) == 0);
  CHECK(same_weights(d / "two.onnx", d / "one.onnx") == 10);  // LeNet-5's 10 parameter tensors
  // Each rank scored half the test batches; merged, the evaluation is the one process's.
  const std::regex eval_line(R"(test loss (\S+)  test accuracy (\S+))");
  std::smatch e2, e1;
  const std::string one = read_text(d / "one.out");
  REQUIRE(std::regex_search(out, e2, eval_line));
  REQUIRE(std::regex_search(one, e1, eval_line));
  CHECK(e2[0] == e1[0]);
}

TEST_CASE("mpi: -np 2 --devices cpu:2 equals one process with 4 devices, bit for bit") {
  if (!have_mpi()) return;
  // AdamW (each learner's moments) with clipped gradients as SGD.
  for (const std::string rule : {"paper", "slowmo",
                                 "paper --optimizer adamw --lr 0.002 "
                                 "--clip-grad-norm 1"}) {
    CAPTURE(rule);
    TempDir d("devices-" + std::to_string(rule.size()));  // a name without spaces
    const std::string args = "--steps 60 --eval-every 30 --learners 1 --sma-rule " + rule;
    REQUIRE(
        run(fmt::format("mpirun -np 2 --bind-to none {} {} --devices cpu:2 --output {} > {} 2>&1",
                        cb_train(), common(args, 2), d / "two.onnx", d / "out")) == 0);
    const std::string out = read_text(d / "out");
    INFO(out);
    CHECK(contains(out, "ranks    2 processes (mpirun) x 2 devices"));
    CHECK(contains(out, "learners 4"));
    REQUIRE(run(fmt::format("{} {} --devices cpu:4 --output {} > {} 2>&1", cb_train(),
                            common(args, 4), d / "one.onnx", d / "one.out")) == 0);
    CHECK(same_weights(d / "two.onnx", d / "one.onnx") == 10);
    // The training loss in the records is the job's: every learner's, the same as one process's.
    const std::string loss2 = last_train_loss(out);
    REQUIRE(!loss2.empty());
    CHECK(last_train_loss(read_text(d / "one.out")) == loss2);
  }
}

TEST_CASE("mpi: --devices cuda under mpirun is set up, and without a GPU says so") {
  if (!have_mpi()) return;
  if (cuda_device_count(nullptr) > 0) return;  // a GPU machine runs it in tools/gpu/check.sh
  TempDir d("cuda");
  const int rc = run(fmt::format("mpirun -np 2 {} {} --devices cuda > {} 2>&1", cb_train(),
                                 common("--steps 5 --learners 1"), d / "log"));
  const std::string log = read_text(d / "log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(contains(log, cuda_backend_built() ? "no GPU found" : "without the CUDA toolkit"));
  CHECK(!contains(log, "not supported"));
}

TEST_CASE(
    "mpi: checkpoints: SIGTERM'd and resumed on 2 ranks, or on 1 rank x 2 learners, end as "
    "the uninterrupted run; a part missing or corrupt is not used") {
  if (!have_mpi()) return;
  TempDir d("ckpt");
  const std::string args = common("--steps 800 --eval-every 400");
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --learners 1 --output {} > {} 2>&1",
                          cb_train(), args, d / "whole.onnx", d / "whole.log")) == 0);
  // Stopped mid-run by SIGTERM to mpirun: every rank writes its part of a last checkpoint.
  // Two written: the stop writes a third.
  const std::string text = sigterm_after(d, args, 40, "ckpt-0000000080");
  INFO(text);
  REQUIRE(contains(text, "stopped by SIGTERM after step"));
  CHECK(contains(text, "a part from each of 2 ranks"));
  const std::vector<std::string> cks = list_checkpoints(d / "ck");
  REQUIRE(cks.size() >= 3);
  CHECK(fs::exists(fs::path(cks.back()) / "tensors-1.bin"));
  fs::copy(d / "ck", d / "ck2", fs::copy_options::recursive);

  // Resumed with -np 2: the uninterrupted run's weights.
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --learners 1 --checkpoint-dir {} "
                          "--resume {} --output {} > {} 2>&1",
                          cb_train(), args, d / "ck", d / "ck", d / "a.onnx", d / "a2.log")) == 0);
  CHECK(contains(read_text(d / "a2.log"), "resume   " + cks.back()));
  CHECK(same_weights(d / "a.onnx", d / "whole.onnx") == 10);
  // cb-export reads every rank's part of the last checkpoint: the model the job wrote.
  REQUIRE(run(fmt::format("{}/cb-export {} --out {} > {} 2>&1", CB_BINARY_DIR, d / "ck",
                          d / "export.onnx", d / "export.log")) == 0);
  CHECK(same_weights(d / "export.onnx", d / "a.onnx") == 10);
  // Resumed from the same 2 x 1 checkpoint by one process with 2 learners: the same.
  REQUIRE(run(fmt::format("{} {} --learners 2 --resume {} --output {} > {} 2>&1", cb_train(), args,
                          d / "ck2", d / "b.onnx", d / "b.log")) == 0);
  const std::string blog = read_text(d / "b.log");
  INFO(blog);
  CHECK(contains(blog, "saved by 2 processes x 1 device"));
  CHECK(same_weights(d / "b.onnx", d / "whole.onnx") == 10);
  // Another total is refused, naming both.
  CHECK(run(fmt::format("{} {} --learners 3 --resume {} > {} 2>&1", cb_train(), args, d / "ck2",
                        d / "c.log")) != 0);
  CHECK(contains(read_text(d / "c.log"),
                 "the checkpoint holds 2 learners in all (2 processes x 1 device x 1); this run "
                 "has 3 (1 process x 1 device x --learners 3)"));

  // The newest checkpoint lacks rank 1's part, the one before has it corrupt: both are refused
  // with a message and the one before them used; the run still ends with the same weights.
  const std::vector<std::string> kept = list_checkpoints(d / "ck2");
  REQUIRE(kept.size() >= 3);
  fs::remove(fs::path(kept[kept.size() - 1]) / "tensors-1.bin");
  {
    const fs::path part = fs::path(kept[kept.size() - 2]) / "tensors-1.bin";
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --learners 1 --resume {} --output {} "
                          "> {} 2>&1",
                          cb_train(), args, d / "ck2", d / "e.onnx", d / "e.log")) == 0);
  const std::string elog = read_text(d / "e.log");
  INFO(elog);
  CHECK(contains(elog, "checkpoint refused (the previous one is used)"));
  CHECK(contains(elog, "tensors-1.bin: missing or not a regular file"));
  CHECK(contains(elog, "tensors-1.bin: fails its checksum"));
  CHECK(contains(elog, "resume   " + kept[kept.size() - 3]));
  CHECK(same_weights(d / "e.onnx", d / "whole.onnx") == 10);
}

// AdamW: every learner's two moments and step count travel in its rank's part of the checkpoint
// and come back on another layout.
TEST_CASE(
    "mpi: AdamW checkpoints: SIGTERM'd and resumed on 2 ranks, or on 1 rank x 2 learners, end as "
    "the uninterrupted run") {
  if (!have_mpi()) return;
  if (test::kSanitized) {
    // Three runs of a thousand steps and more (the SIGTERM needs a run still going); the
    // checkpoint paths themselves run under the sanitizer in the SGD test above.
    MESSAGE("under a sanitizer: skipped, the Release build runs it");
    return;
  }
  TempDir d("ckadam");
  const std::string args =
      common("--steps 1200 --eval-every 600 --optimizer adamw --lr 0.002 --weight-decay 0.01");
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --learners 1 --output {} > {} 2>&1",
                          cb_train(), args, d / "whole.onnx", d / "whole.log")) == 0);
  const std::string text = sigterm_after(d, args, 20, "ckpt-0000000040");
  INFO(text);
  REQUIRE(contains(text, "stopped by SIGTERM after step"));
  fs::copy(d / "ck", d / "ck2", fs::copy_options::recursive);
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --learners 1 --checkpoint-dir {} "
                          "--resume {} --output {} > {} 2>&1",
                          cb_train(), args, d / "ck", d / "ck", d / "a.onnx", d / "a2.log")) == 0);
  CHECK(same_weights(d / "a.onnx", d / "whole.onnx") == 10);
  REQUIRE(run(fmt::format("{} {} --learners 2 --resume {} --output {} > {} 2>&1", cb_train(), args,
                          d / "ck2", d / "b.onnx", d / "b.log")) == 0);
  INFO(read_text(d / "b.log"));
  CHECK(same_weights(d / "b.onnx", d / "whole.onnx") == 10);
}

TEST_CASE("mpi: a rank killed while checkpoints are written leaves a loadable previous one") {
  if (!have_mpi()) return;
  TempDir d("killck");
  const std::string log = d / "log";
  // A checkpoint after every step: most of the run is spent writing them.
  const pid_t job =
      start(fmt::format("-np 2 --bind-to none {} {} --checkpoint-dir {} "
                        "--checkpoint-every 1 --keep 1000",
                        cb_train(), common("--steps 1000000 --learners 1 --collective-timeout 5"),
                        d / "ck"),
            log);
  const pid_t victim = rank_pid(log, 1);
  REQUIRE(victim > 0);
  for (int i = 0; i < 600 && list_checkpoints(d / "ck").size() < 5; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(victim, SIGKILL);
  CHECK(finish(job, 60) != 0);
  INFO(read_text(log));
  const std::vector<std::string> cks = list_checkpoints(d / "ck");
  REQUIRE(cks.size() >= 5);
  // The newest complete checkpoint loads, every part checked (a write cut short is a .tmp).
  LoadedCheckpoint ck;
  CHECK_NOTHROW(ck = load_checkpoint(d / "ck"));
  CHECK(ck.refused.empty());
  CHECK(ck.state.model.learners.size() == 2);
  CHECK(ck.path == cks.back());
}

TEST_CASE("mpi: each rank decodes only its own learners' images; --cache is packed by rank 0") {
  if (!have_mpi()) return;
  TempDir d("decode");
  write_fashion_folder(d / "folder", 600, 40);
  const int64_t steps = 20, batch = 16;
  const std::string args = fmt::format(
      "{}/models/lenet5_op17.onnx --data {} --threads 1 --seed 1 --steps {} --batch-size {} "
      "--learners 1 --workers 1",
      CB_SOURCE_DIR, d / "folder", steps, batch);
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --metrics {} --report {} > {} 2>&1",
                          cb_train(), args, d / "m.jsonl", d / "report.html", d / "log")) == 0);
  const std::string log = read_text(d / "log");
  INFO(log);
  // The 40 test images are 3 batches (16, 16, 8): rank 0 scores the first and the last, rank 1
  // the second, at every evaluation (no rank decodes them all).
  std::smatch t0, t1;
  REQUIRE(std::regex_search(log, t0, std::regex(R"(rank     0 on .* and (\d+) test images)")));
  REQUIRE(std::regex_search(log, t1, std::regex(R"(rank     1 on .* and (\d+) test images)")));
  const int64_t test0 = std::stoll(t0[1]), test1 = std::stoll(t1[1]);
  CHECK(test0 > 0);
  CHECK(test0 * 16 == test1 * 24);
  CHECK((test0 + test1) % 40 == 0);
  // Every rank's numbers reach the summary record and the report's table.
  const std::string metrics = read_text(d / "m.jsonl");
  CHECK(contains(metrics, R"("ranks":[{"rank":0,)"));
  CHECK(contains(metrics, R"({"rank":1,)"));
  CHECK(contains(read_text(d / "report.html"), "<h2>Ranks (processes)</h2>"));
  // Each rank made its learner's batches (20 of 16), and the few its pipeline had ahead: about
  // half of what the job trained on, not all of it.
  const int64_t job_images = steps * 2 * batch;
  for (int r = 0; r < 2; ++r) {
    std::smatch m;
    REQUIRE(std::regex_search(
        log, m, std::regex(fmt::format(R"(rank     {} on \S+: made (\d+) training images)", r))));
    const int64_t made = std::stoll(m[1]);
    CAPTURE(r);
    CHECK(made >= job_images / 2);
    CHECK(made <= job_images / 2 + 8 * batch);
  }
  // --cache: rank 0 packs the folder, rank 1 waits and reads the same pack.
  REQUIRE(run(fmt::format("mpirun -np 2 --bind-to none {} {} --cache {} > {} 2>&1", cb_train(),
                          args, d / "pack", d / "cache.log")) == 0);
  const std::string clog = read_text(d / "cache.log");
  INFO(clog);
  CHECK(contains(clog, "cache    packing"));
  CHECK(fs::exists(d / "pack"));
  CHECK(contains(clog, "z identical on all 2 ranks"));
}

TEST_CASE("mpi: ranks that differ are refused before the first step, naming the difference") {
  if (!have_mpi()) return;
  TempDir d("differ");
  const int rc =
      run(fmt::format("mpirun -np 1 {0} {1} --batch-size 16 : -np 1 {0} {1} "
                      "--batch-size 32 > {2} 2>&1",
                      cb_train(), common("--steps 10 --learners 1"), d / "log"));
  const std::string log = read_text(d / "log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(contains(log, "the ranks of this job differ"));
  CHECK(contains(log, "--batch-size: rank 0 has 16, rank 1 has 32"));
  CHECK(!contains(log, "epoch "));  // no step was taken

  // A rank that fails on its own (its data folder is missing) ends the job at once, named.
  const auto t0 = std::chrono::steady_clock::now();
  const int bad = run(fmt::format("mpirun -np 1 {0} {1} : -np 1 {0} {2} > {3} 2>&1", cb_train(),
                                  common("--steps 10 --learners 1"),
                                  fmt::format("{}/models/lenet5_op17.onnx --data {} --steps 10 "
                                              "--learners 1 --threads 1",
                                              CB_SOURCE_DIR, d / "missing"),
                                  d / "bad.log"));
  const std::string badlog = read_text(d / "bad.log");
  INFO(badlog);
  CHECK(bad != 0);
  CHECK(contains(badlog, "cb-train (rank 1 of 2): error: data folder"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 60);
}

TEST_CASE("mpi: a rank killed or stopped ends the whole job, named, within the timeout") {
  if (!have_mpi()) return;
  TempDir d("dead");
  for (const char* how : {"kill", "stop"}) {
    CAPTURE(how);
    const std::string log = d / fmt::format("{}.log", how);
    const pid_t job = start(fmt::format("-np 2 {} {}", cb_train(),
                                        common("--steps 1000000 --learners 1 "
                                               "--collective-timeout 5")),
                            log);
    const pid_t victim = rank_pid(log, 1);
    REQUIRE(victim > 0);
    wait_for_text(log, "train    batch");  // both ranks are past start-up
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto t0 = std::chrono::steady_clock::now();
    kill(victim, std::string(how) == "kill" ? SIGKILL : SIGSTOP);
    const int rc = finish(job, 60);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = read_text(log);
    INFO(text);
    CHECK(rc != 0);
    CHECK(rc != -1);  // it ended by itself
    CHECK(took < 30);
    if (std::string(how) == "kill") {
      CHECK(contains(text, "rank 1"));  // mpirun names the process that died
    } else {
      CHECK(contains(text, "did not complete within 5 s"));
      CHECK(contains(text, "rank 1 sent no heartbeat"));  // rank 0 names the rank at fault
      kill(victim, SIGKILL);                              // if MPI_Abort left it stopped
    }
  }
}

TEST_CASE("mpi: SIGTERM to the job stops every rank after the same step, the model written") {
  if (!have_mpi()) return;
  TempDir d("sigterm");
  const std::string log = d / "log";
  const pid_t job = start(fmt::format("-np 2 {} {} --output {}", cb_train(),
                                      common("--steps 1000000 --learners 1"), d / "out.onnx"),
                          log);
  wait_for_text(log, "train    batch");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill(job, SIGTERM);
  finish(job, 60);
  const std::string text = read_text(log);
  INFO(text);
  CHECK(contains(text, "stopped by SIGTERM after step"));
  CHECK(fs::exists(d / "out.onnx"));
  CHECK(import_model(d / "out.onnx").graph.nodes.size() > 0);
}
