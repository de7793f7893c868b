// The auto-tuner (sma/auto_tuner.h): its decisions on synthetic throughput (add learners while
// they pay, compare medians against their spread), and a run that applies them.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "importer/onnx_importer.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/error.h"
#include "sma/auto_tuner.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tests/sma_util.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"
#include "viz/report.h"

using namespace cb;
using namespace cb::test::sma;
namespace fs = std::filesystem;

using test::contains;
using test::CpuSetup;
using test::CpuTrainer;
using test::error_of;

// ---- the auto-tuner ----------------------------------------------------------------------------

TEST_CASE("auto-tuner: adds learners while they pay, backs off one on the first that does not") {
  TunerOptions o;
  o.threshold = 0.05;
  o.windows = 1;  // one window per number: the median is the window
  AutoTuner t(o, 1);
  TunerDecision d = t.observe(1000, true);
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.learners == 2);
  d = t.observe(1800, true);  // +80%
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.gain == doctest::Approx(0.8));
  CHECK(d.learners == 3);
  d = t.observe(1880, true);  // +4.4% <= 5%: does not pay
  CHECK(d.action == TunerDecision::Action::BackOff);
  CHECK(d.measured == 3);
  CHECK(d.learners == 2);
  CHECK(t.done());
  CHECK(t.learners() == 2);

  AutoTuner equal(o, 1);  // exactly the threshold is not a gain
  equal.observe(1000, true);
  CHECK(equal.observe(1050, true).action == TunerDecision::Action::BackOff);
  AutoTuner above(o, 1);
  above.observe(1000, true);
  CHECK(above.observe(1051, true).action == TunerDecision::Action::Add);

  AutoTuner slower(o, 1);
  slower.observe(1000, true);
  d = slower.observe(700, true);
  CHECK(d.action == TunerDecision::Action::BackOff);
  CHECK(d.learners == 1);

  AutoTuner memory(o, 1);  // the memory plan says the third replica does not fit
  CHECK(memory.observe(1000, true).action == TunerDecision::Action::Add);
  d = memory.observe(1500, false);
  CHECK(d.action == TunerDecision::Action::Settle);
  CHECK(d.learners == 2);
  CHECK(contains(d.reason, "memory"));
  CHECK(memory.done());

  AutoTuner none(o, 1);  // not even a second replica fits
  d = none.observe(1000, false);
  CHECK(d.action == TunerDecision::Action::Settle);
  CHECK(d.learners == 1);

  o.max_learners = 2;
  AutoTuner capped(o, 1);
  capped.observe(1000, true);
  d = capped.observe(2000, true);
  CHECK(d.action == TunerDecision::Action::Settle);
  CHECK(d.learners == 2);
}

TEST_CASE("auto-tuner: compares medians of several windows and needs a gain above their spread") {
  TunerOptions o;
  o.threshold = 0.05;
  o.windows = 5;
  AutoTuner t(o, 1);
  // k = 1: windows 800 900 1000 1150 1250: median 1000; the spread without the slowest and the
  // fastest is (1150 - 900) / 1000 = 25%.
  for (double w : {1000.0, 800.0, 1250.0, 900.0}) {
    TunerDecision m = t.observe(w, true);
    CHECK(m.action == TunerDecision::Action::Measure);
    CHECK(m.learners == 1);
  }
  TunerDecision d = t.observe(1150, true);
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.images_per_s == 1000);
  CHECK(d.spread == doctest::Approx(0.25));
  CHECK(d.windows.size() == 5);
  // k = 2: median 1200 (+20%), spread 20 / 1200. The noise is the larger spread of the two, 25%,
  // so a 20% gain is not clearly a gain: back to one learner.
  for (double w : {1200.0, 1150.0, 1250.0, 1200.0}) t.observe(w, true);
  d = t.observe(1180, true);
  CHECK(d.images_per_s == 1200);
  CHECK(d.spread == doctest::Approx(20.0 / 1200));
  CHECK(d.gain == doctest::Approx(0.2));
  CHECK(d.noise == doctest::Approx(0.25));
  CHECK(d.required == doctest::Approx(0.25));
  CHECK(d.action == TunerDecision::Action::BackOff);
  CHECK(d.learners == 1);
  CHECK(t.done());

  // On a quiet machine (spread 1%) the threshold decides, and one wild window moves neither the
  // median of five nor the spread.
  AutoTuner quiet(o, 1);
  for (double w : {1000.0, 990.0, 1010.0, 1005.0, 995.0}) d = quiet.observe(w, true);
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.spread == doctest::Approx(0.01));
  for (double w : {1143.0, 1140.0, 1145.0, 1150.0, 1143.0}) d = quiet.observe(w, true);
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.required == doctest::Approx(0.05));
  CHECK(d.learners == 3);
  for (double w : {1400.0, 1390.0, 90.0, 1410.0, 1400.0}) d = quiet.observe(w, true);
  CHECK(d.images_per_s == 1400);
  CHECK(d.spread == doctest::Approx(10.0 / 1400));
  CHECK(d.action == TunerDecision::Action::Add);
  CHECK(d.learners == 4);
  // Fewer than 5 windows: the whole range counts.
  o.windows = 3;
  AutoTuner three(o, 1);
  for (double w : {1000.0, 900.0, 1100.0}) d = three.observe(w, true);
  CHECK(d.spread == doctest::Approx(0.2));
}

TEST_CASE("auto-tuner: a run applies its decisions, new learners start from z") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  ImportResult r = import_model(kLenet);
  CpuTrainer t(r.graph, detect_loss(r.graph), lenet_options({0, 1}, 1, 1));
  CHECK(t.alpha() == 0);  // one learner: plain SGD, z does not move
  const std::vector<float> z0 = t.central();
  t.step(file_batches(test::mem(data.train), 0, 1, 16), 0.01);
  t.step(file_batches(test::mem(data.train), 1, 1, 16), 0.01);
  CHECK(t.central() == z0);
  // One learner holds only z beside its own rows: no z_prev, corrections' sum or mean (its row is
  // the mean); a checkpoint's z_prev is z, whose momentum is at rest.
  const int64_t P4 = t.model().flat_elems() * 4;
  CHECK(t.memory().fixed == t.shared_bytes(1));
  CHECK(t.shared_bytes(3) - t.shared_bytes(1) == 3 * P4);
  CHECK(t.state().z_prev == z0);
  const std::vector<float> r0 = t.replica(0);
  t.set_learners(3);  // a pull from now on: z starts as the learners' average (the one replica)
  CHECK(t.alpha() == 0.5);
  CHECK(t.lr_factor() == doctest::Approx(std::sqrt(3.0)));
  CHECK(t.central() == r0);
  CHECK(t.replica(0) == r0);
  CHECK(t.replica(1) == t.central());
  CHECK(t.replica(2) == t.central());
  t.step(file_batches(test::mem(data.train), 2, 3, 16), 0.01);
  CHECK(t.replica(0) != t.central());
  t.set_learners(2);
  CHECK(t.total_learners() == 2);
  CHECK(t.alpha() == 0.5);
  t.step(file_batches(test::mem(data.train), 5, 2, 16), 0.01);
  CHECK(t.memory().fixed == t.shared_bytes(2));
  // Back to one learner, whose row is the model: the pull's buffers go, and a second learner
  // seeds z from that row again.
  t.set_learners(1);
  CHECK(t.alpha() == 0);
  CHECK(t.memory().fixed == t.shared_bytes(1));
  const std::vector<float> r1 = t.replica(0);
  t.step(file_batches(test::mem(data.train), 7, 1, 16), 0.01);
  const std::vector<float> r2 = t.replica(0);
  CHECK(r2 != r1);
  CHECK(t.state().z_prev == t.central());
  t.set_learners(2);
  CHECK(t.central() == r2);
  CHECK(t.replica(1) == r2);
  t.step(file_batches(test::mem(data.train), 8, 2, 16), 0.01);
  CHECK(t.replica(0) != t.central());

  // Over budget: named in bytes.
  CpuSetup tight = lenet_options({0, 1}, 1, 1);
  tight.opts.memory_budget = t.need(2);
  CpuTrainer small(r.graph, detect_loss(r.graph), tight);
  CHECK(small.fits(2));
  CHECK(!small.fits(3));
  std::string e = error_of([&] { small.set_learners(3); });
  CHECK(contains(e, "out of memory"));
  CHECK(contains(e, "MiB"));

  // A short auto-tuned run: decisions are reported and applied.
  RunOptions ro;
  ro.steps = 40;
  ro.test_limit = 50;
  ro.auto_tune = true;
  ro.tuner.warmup_steps = 2;
  ro.tuner.window_steps = 5;
  ro.tuner.windows = 2;
  std::vector<TunerDecision> decisions;
  Callbacks cb;
  cb.on_tune = [&](const TunerDecision& d, const TrainMemory& m) {
    decisions.push_back(d);
    CHECK(m.per_replica > m.arena);
  };
  CpuTrainer tuned(r.graph, detect_loss(r.graph), tight);  // at most 2 learners fit
  RunSummary s = train(tuned, data, ro, cb);
  REQUIRE(!decisions.empty());
  CHECK(decisions.front().measured == 1);
  CHECK(decisions.front().windows.size() == 2);
  CHECK(decisions.back().action != TunerDecision::Action::Add);
  CHECK(s.learners == decisions.back().learners);
  CHECK(s.learners <= 2);
}
