// The training loop around the SMA trainer (sma/train_loop.h): a run stopped mid-way and restored
// from its TrainState continues bit for bit; --evals-per-epoch evaluates at every 1/N of the
// training set whatever the number of learners.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "importer/onnx_importer.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/error.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tests/sma_util.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;
using namespace cb::test::sma;
namespace fs = std::filesystem;

using test::contains;
using test::CpuSetup;
using test::CpuTrainer;
using test::error_of;

TEST_CASE("train: a run stopped mid-way and restored into a new trainer continues bit for bit") {
  // Dropout (each learner's RNG position), momentum and AdamW state (one learner's and SMA
  // learners'), SMA's z and z_prev, a learning-rate drop with its reset to z, the data order: all
  // must come back from TrainState.
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  const Graph g = gemm_graph(w0, b0, true, true);
  const Dataset data = tiny_data(rng);
  RunOptions ro;
  ro.steps = 14;
  ro.seed = 5;
  ro.schedule.kind = LrScheduleKind::MultiStep;
  ro.schedule.milestones = {2};
  ro.schedule.lr = 0.05;
  struct Case {
    const char* name;
    CpuSetup s;
  };
  std::vector<Case> cases(6);
  cases[0].name = "plain SGD, one learner";
  cases[0].s.opts = test::plain(TrainerOptions{});
  cases[1].name = "SMA, 3 learners";
  cases[1].s.opts.learners = 3;
  cases[2].name = "SMA, 2 devices x 2 learners, sync every 2";
  cases[2].s.opts.learners = 2;
  cases[2].s.opts.sync_every = 2;
  cases[2].s.devices = 2;
  cases[2].s.cores = {0, 0};
  cases[3].name = "AdamW, one learner";
  cases[3].s.opts = test::plain(TrainerOptions{});
  cases[3].s.opts.optimizer = OptimizerKind::AdamW;
  cases[4].name = "SMA with AdamW, 2 devices x 2 learners, clipped gradients";
  cases[4].s.opts.optimizer = OptimizerKind::AdamW;
  cases[4].s.opts.learners = 2;
  cases[4].s.opts.clip_grad_norm = 0.5;
  cases[4].s.devices = 2;
  cases[4].s.cores = {0, 0};
  cases[5].name = "SMA with AdamW, post-local, 3 learners";
  cases[5].s.opts.optimizer = OptimizerKind::AdamW;
  cases[5].s.opts.learners = 3;
  cases[5].s.opts.sma_rule = SmaRule::PostLocal;
  cases[5].s.opts.sync_every = 2;
  cases[5].s.opts.local_after = 3;
  int checked = 0;
  for (Case& c : cases) {
    CAPTURE(c.name);
    c.s.opts.batch = 2;
    const LossSpec loss{LossKind::MeanSquaredError, ""};
    CpuTrainer whole(g, loss, c.s);
    LoopState lw;
    std::vector<int64_t> resets;
    Callbacks cb;
    cb.on_reset = [&](int64_t step, double) { resets.push_back(step); };
    RunSummary sw = train(whole, data, ro, cb, &lw);
    REQUIRE(sw.steps == 14);

    RunOptions first = ro;
    first.steps = 5;  // stop before the drop
    CpuTrainer a(g, loss, c.s);
    LoopState la;
    train(a, data, first, {}, &la);
    const TrainState saved = capture(a, la);
    CHECK(saved.loop.step == 5);
    CpuTrainer b(g, loss, c.s);
    LoopState lb = restore(b, saved);
    RunSummary sb = train(b, data, ro, {}, &lb);
    CHECK(sb.steps == 14);
    CHECK(lb.consumed == lw.consumed);
    CHECK(lb.decays == lw.decays);
    for (int l = 0; l < whole.local_learners(); ++l) {
      CHECK(b.replica(l) == whole.replica(l));
      CHECK(b.velocity(l) == whole.velocity(l));
    }
    CHECK(b.central() == whole.central());
    const ModelState mw = whole.state(), mb = b.state();
    CHECK(mb.z_prev == mw.z_prev);
    for (size_t l = 0; l < mw.learners.size(); ++l) {
      CHECK(mb.learners[l].opt2 == mw.learners[l].opt2);
      CHECK(mb.learners[l].steps == mw.learners[l].steps);
    }
    CHECK(std::vector<double>(sw.losses.begin() + 5, sw.losses.end()) == sb.losses);
    if (whole.alpha() > 0) CHECK(!resets.empty());  // the drop was crossed after the stop
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("train: --evals-per-epoch evaluates at every 1/N of the training set, whatever K") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  data.train =
      std::make_shared<ImageSet>(test::mem(data.train).head(192));  // 12 batches of 16 an epoch
  ImportResult r = import_model(kLenet);
  CpuTrainer t(r.graph, detect_loss(r.graph), lenet_options({0, 1}, 1, 2));
  RunOptions ro;
  ro.epochs = 1;
  ro.evals_per_epoch = 4;  // every 3 batches; a step of 2 learners takes 2
  ro.test_limit = 50;
  std::vector<double> at;
  Callbacks cb;
  cb.on_eval = [&](const EvalReport& e) { at.push_back(e.epoch); };
  train(t, data, ro, cb);
  // Batches consumed after each step: 2 4 6 8 10 12; the quarter marks 3, 6, 9, 12 are passed at
  // steps 2, 3, 5 and 6.
  REQUIRE(at.size() == 4);
  CHECK(at[0] == doctest::Approx(4.0 / 12));
  CHECK(at[1] == doctest::Approx(6.0 / 12));
  CHECK(at[2] == doctest::Approx(10.0 / 12));
  CHECK(at[3] == doctest::Approx(1.0));
  ro.evals_per_epoch = 0;
  CHECK(contains(error_of([&] { train(t, data, ro); }), "--evals-per-epoch must be at least 1"));
}
