// cb-train end to end with SMA options: metrics records, the output written at every evaluation,
// the auto-tuner's printed decisions, a target accuracy, and divergence keeping the last good
// model.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "importer/onnx_importer.h"
#include "kernels/cpu/conv.h"
#include "tests/sma_util.h"
#include "tests/test_util.h"
#include "viz/report.h"

using namespace cb;
using namespace cb::test::sma;
namespace fs = std::filesystem;

using test::contains;
using test::CpuSetup;
using test::CpuTrainer;
using test::error_of;

// ---- cb-train -----------------------------------------------------------------------------------

TEST_CASE("cb-train: SMA options, metrics, output at every evaluation, divergence keeps it") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  const fs::path dir = fs::temp_directory_path() / fmt::format("cb_test_sma_{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = (dir / "m.onnx").string(), metrics = (dir / "m.jsonl").string(),
                    log = (dir / "log.txt").string();
  auto run = [&](const std::string& args) {
    std::string cmd = fmt::format("{}/cb-train {} --data {} {} > {} 2>&1", CB_BINARY_DIR, kLenet,
                                  kFashion, args, log);
    int rc = std::system(cmd.c_str());
    std::ifstream f(log);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    return std::make_pair(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, text);
  };
  // --deterministic is accepted on the CPU (whose kernels always are) and changes nothing there.
  auto [rc, text] = run(fmt::format(
      "--learners 2 --devices cpu:2 --threads 2 --steps 40 --eval-every 20 --test-limit 100 "
      "--metrics {} --output {} --sync-every 2 --central-momentum 0.5 --deterministic",
      metrics, out));
  CAPTURE(text);
  CHECK(rc == 0);
  CHECK(contains(text, "2 devices"));
  CHECK(contains(text, "learners 4"));
  CHECK(fs::exists(out));
  CHECK(!fs::exists(out + ".tmp"));
  // The records: config, one per evaluation, summary (viz/report.h).
  const std::vector<nlohmann::ordered_json> recs = viz::read_metrics(metrics);
  REQUIRE(recs.size() == 4);
  CHECK(recs[0]["type"] == "config");
  CHECK(recs[0]["memory"]["per_replica"].get<int64_t>() > 0);
  CHECK(recs[1]["type"] == "eval");
  CHECK(recs[3]["type"] == "summary");
  CHECK(recs[3]["steps"] == 40);
  const auto& last = recs[2];
  CHECK(last["type"] == "eval");
  CHECK(last["step"] == 40);
  CHECK(last["learners"] == 4);
  CHECK(last["learners_per_device"] == 2);
  for (const char* key : {"time", "epoch", "loss", "test_loss", "accuracy", "images_per_s", "lr",
                          "data_wait_s", "spread", "memory_bytes"})
    CHECK(last.contains(key));
  CHECK(last["spread"].get<double>() > 0);
  ImportResult back = import_model(out);
  CHECK(back.graph.nodes.size() > 0);

  // The auto-tuner prints its decisions; a target accuracy stops the run and reports the time.
  std::tie(rc, text) =
      run("--steps 300 --eval-every 50 --test-limit 200 --tuner-warmup 2 --tuner-window 10 "
          "--target-accuracy 0.3");
  CAPTURE(text);
  CHECK(rc == 0);
  CHECK(contains(text, "tuner    1 learner/device ("));
  CHECK(contains(text, "target   test accuracy 30.00% reached after"));

  // Divergence: exit 1 naming the step and the learner; the last evaluation's model stays.
  fs::remove(out);
  std::tie(rc, text) = run(fmt::format(
      "--learners 2 --steps 200 --eval-every 1 --test-limit 16 --lr 50 --output {}", out));
  CAPTURE(text);
  CHECK(rc == 1);
  CHECK(contains(text, "diverged at step"));
  CHECK(contains(text, "learner"));
  CHECK(contains(text, "holds the last good model"));
  CHECK(fs::exists(out));
  CHECK(!fs::exists(out + ".tmp"));
  import_model(out);  // loads: a whole file

  // The central rule in force is printed with its origin: the paper's below 16 learners, post-local
  // from 16 with the large-batch warm-up (5 epochs from K = 64), --warmup-steps given wins.
  std::tie(rc, text) = run("--learners 2 --steps 1 --test-limit 16");
  CHECK(rc == 0);
  CHECK(contains(text, "rule paper, alpha 0.5 (min(2/K, 1/2) at K = 2)"));
  std::tie(rc, text) = run("--learners 64 --steps 1 --test-limit 16");
  CHECK(rc == 0);
  CHECK(contains(text,
                 "rule post-local (learners averaged every step, reset to z: the default "
                 "from K = 16), alpha 0.01562 (1/K: the learners' mean at K = 64)"));
  CHECK(contains(text, "18750 warm-up steps (5 epochs: the post-local rule's)"));
  CHECK(contains(text, "z update not overlapped"));
  std::tie(rc, text) = run("--learners 16 --steps 1 --test-limit 16 --warmup-steps 100");
  CHECK(rc == 0);
  CHECK(contains(text, "constant + 100 warm-up steps,"));
  std::tie(rc, text) = run("--learners 4 --steps 1 --sma-rule slowmo --alpha 0.1");
  CHECK(rc == 2);
  CHECK(contains(text, "--alpha is the pull of the paper and elastic rules"));
  // --help shows what each value is.
  std::tie(rc, text) = run("--help");
  CHECK(rc == 0);
  CHECK(contains(text, "--batch-size INT=16"));
  CHECK(contains(text, "--lr FLOAT=0.01"));
  CHECK(contains(text, "--central-momentum FLOAT "));
  CHECK(contains(text, "--sma-rule TEXT "));
  fs::remove_all(dir);
}  // --precision bf16 on the CPU: the convolutions marked (the session says how many), training
   // runs
// and the exported model is the usual f32 one; where the cores have no bf16 kernels the run is
// refused before training, naming the device and why. fp16 is refused with what to use.
TEST_CASE("cb-train --precision: bf16 where the cores have it, refused with the reason elsewhere") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  test::TempDir dir("precision");
  const std::string out = dir / "m.onnx", log = dir / "log.txt";
  auto run = [&](const std::string& args) {
    std::string cmd = fmt::format("{}/cb-train {} --data {} {} > {} 2>&1", CB_BINARY_DIR, kLenet,
                                  kFashion, args, log);
    int rc = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::read_text(log));
  };
  auto [rc, text] =
      run("--learners 1 --threads 2 --steps 40 --test-limit 200 --precision bf16 --output " + out);
  CAPTURE(text);
  if (cpu::dnnl_bf16_available()) {
    CHECK(rc == 0);
    // LeNet-5: two Conv and their two ConvGrad; three Gemm and their six gradient products
    // (each layer's input and weight): 13 in all.
    CHECK(contains(text,
                   "precision bf16: 13 convolutions and matrix products (forward and backward) "
                   "multiply in bf16"));
    const Graph g = import_model(out).graph;
    for (const Value& v : g.values)
      if (v.data) CHECK(v.data->dtype == DType::F32);
  } else {
    CHECK(rc != 0);
    CHECK(contains(text, "--precision bf16: cpu cannot run bf16 convolutions at speed"));
  }
  std::tie(rc, text) = run("--steps 1 --precision fp16");
  CHECK(rc != 0);
  CHECK(contains(text, "--precision fp16: fp16 (with loss scaling) is not implemented"));
}
