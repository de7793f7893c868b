// The weight average (--ema, sma/trainer.h): after every update of the model evaluation uses, e <-
// d e + (1 - d) m for the parameters (of z, or of the learners' mean with alpha 0) and the BN
// statistics, a copy of the model until --ema-start; recomputed here on the host from the
// trainer's own state, bit for bit. A saved and restored state (and a checkpoint read back)
// continues bit for bit; the exported model is the evaluated one; the loop reports both.
#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "importer/onnx_exporter.h"
#include "importer/onnx_importer.h"
#include "runtime/error.h"
#include "session/option_table.h"
#include "session/options.h"
#include "sma/checkpoint.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;
namespace fs = std::filesystem;
using test::contains;
using test::error_of;
using test::TempDir;

namespace {

const std::string kResnet20 = CB_SOURCE_DIR "/models/resnet20_op17.onnx";

// Random CIFAR-shaped batches of `n` images, one per learner.
// One update of the average as the kernels compute it, in float.
void mix(std::vector<float>& e, const std::vector<float>& m, float decay) {
  const float rest = 1.0f - decay;
  for (size_t i = 0; i < e.size(); ++i) e[i] = decay * e[i] + rest * m[i];
}

// Device d's share of the learners' mean of a [len] row (SmaRowSum's order, scale 1/K).
std::vector<float> share(const ModelState& s, int d, bool params, int K) {
  const auto k = static_cast<size_t>(s.learners_per_device);
  const auto& first = params ? s.learners[d * k].params : s.learners[d * k].state;
  const float scale = static_cast<float>(1.0 / K);
  std::vector<float> m(first.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = scale * first[i];
  for (size_t r = 1; r < k; ++r) {
    const auto& x = params ? s.learners[d * k + r].params : s.learners[d * k + r].state;
    for (size_t i = 0; i < m.size(); ++i) m[i] = m[i] + scale * x[i];
  }
  return m;
}

// Two learners of batch 2 on one CPU device, with the average's decay `ema`.
test::CpuSetup two_learners(double ema) {
  test::CpuSetup s;
  s.opts.batch = 2;
  s.opts.learners = 2;
  s.opts.ema = ema;
  return s;
}

bool same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.count(name) || b.at(name).bytes != t.bytes) return false;
  return true;
}

}  // namespace

TEST_CASE("ema: the average follows z (or the learners' mean), BN statistics too, from the start") {
  ImportResult r = import_model(kResnet20);
  const LossSpec loss = detect_loss(r.graph);
  struct Setup {
    int devices, learners;
    const char* what;
  };
  for (const Setup& c : {Setup{1, 1, "one learner: alpha 0, the replica"},
                         Setup{1, 3, "3 learners: z"}, Setup{2, 2, "2 devices x 2: z, shares"}}) {
    CAPTURE(c.what);
    test::CpuSetup s;
    s.opts.batch = 2;
    s.opts.learners = c.learners;
    s.devices = c.devices;
    s.cores = {0, 1};
    s.opts.ema = 0.75;
    s.opts.ema_start = 2;
    test::CpuTrainer t(r.graph, loss, s);
    const int K = t.total_learners();
    const bool mean = t.alpha() == 0;
    CHECK(mean == (K == 1));
    ModelState st = t.state();
    REQUIRE(st.ema.size() == static_cast<size_t>(c.devices));
    std::vector<std::vector<float>> e = st.ema, es = st.ema_state;
    // At the start: the initial model, the statistics held by the first device only.
    CHECK(e[0] == st.z);
    for (int d = 1; d < c.devices; ++d) CHECK(es[d] == std::vector<float>(es[d].size(), 0.0f));
    std::mt19937_64 rng(5);
    for (int step = 1; step <= 5; ++step) {
      CAPTURE(step);
      t.step(test::random_cifar_batches(rng, t.local_learners(), 2), 0.05);
      st = t.state();
      // Before --ema-start a copy; then warmed up: min(d, (1 + n) / (10 + n)) at update n.
      const int n = step - 2;
      const float decay =
          n <= 0 ? 0.0f : static_cast<float>(std::min(0.75, (1.0 + n) / (10.0 + n)));
      for (int d = 0; d < c.devices; ++d) {
        mix(e[d], mean ? share(st, d, true, K) : st.z, decay);
        mix(es[d], share(st, d, false, K), decay);
        CHECK(st.ema[d] == e[d]);
        CHECK(st.ema_state[d] == es[d]);
      }
      if (step <= 2) CHECK(st.ema[0] == (mean ? st.learners[0].params : st.z));
    }
    CHECK(st.ema[0] != st.z);
    // What evaluation and export use: the average (the shares added over the devices), equal to
    // what a checkpoint's state gives cb-export.
    CHECK(same(t.trained_tensors(), model_tensors(t.model(), st)));
    ModelState plain = st;
    plain.ema.clear();
    plain.ema_state.clear();
    CHECK(!same(t.trained_tensors(), model_tensors(t.model(), plain)));
  }
}

TEST_CASE("ema: a restored state (and a checkpoint read back) continues bit for bit") {
  ImportResult r = import_model(kResnet20);
  const LossSpec loss = detect_loss(r.graph);
  const test::CpuSetup s = two_learners(0.9);
  std::mt19937_64 rng(8);
  std::vector<std::vector<Batch>> steps;
  for (int i = 0; i < 5; ++i) steps.push_back(test::random_cifar_batches(rng, 2, 2));
  test::CpuTrainer whole(r.graph, loss, s);
  for (const auto& b : steps) whole.step(b, 0.05);

  test::CpuTrainer a(r.graph, loss, s);
  for (int i = 0; i < 3; ++i) a.step(steps[i], 0.05);
  TempDir d("ema");
  TrainState cs;
  cs.model = a.state();
  cs.loop.started = true;
  cs.loop.step = 3;
  write_checkpoint(d.path.string(), cs, CheckpointMeta{"hash", "data", 2, "cb-train ...", "", ""});
  LoadedCheckpoint ck = load_checkpoint(d.path.string());
  REQUIRE(ck.state.model.ema.size() == 1);
  CHECK(ck.state.model.ema == cs.model.ema);
  CHECK(ck.state.model.ema_state == cs.model.ema_state);
  test::CpuTrainer b(r.graph, loss, s);
  b.restore(ck.state.model);
  for (int i = 3; i < 5; ++i) b.step(steps[i], 0.05);
  CHECK(same(b.trained_tensors(), whole.trained_tensors()));
  CHECK(b.state().ema == whole.state().ema);

  // A state saved without the average: it starts again from the restored model.
  ModelState without = cs.model;
  without.ema.clear();
  without.ema_state.clear();
  test::CpuTrainer c(r.graph, loss, s);
  c.restore(without);
  CHECK(c.state().ema[0] == cs.model.z);
  // The saved shares must fit the devices.
  ModelState two = cs.model;
  two.ema.push_back(two.ema[0]);
  two.ema_state.push_back(two.ema_state[0]);
  CHECK(contains(error_of([&] { c.restore(two); }), "2 parts, this run has 1 devices"));
}

TEST_CASE("ema: the exported model computes what evaluation evaluates; the loop reports both") {
  ImportResult r = import_model(kResnet20);
  const LossSpec loss = detect_loss(r.graph);
  const test::CpuSetup s = two_learners(0.5);
  test::CpuTrainer t(r.graph, loss, s);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3; ++i) t.step(test::random_cifar_batches(rng, 2, 2), 0.05);
  const Batch probe = test::random_cifar_batches(rng, 1, 2)[0];
  TempDir d("ema_export");
  export_trained(kResnet20, d / "avg.onnx", t.trained_tensors());
  ImportResult back = import_model(d / "avg.onnx");
  TrainerOptions one;
  one.batch = 2;
  auto dev = make_cpu_device(1);
  test::CpuTrainer u(back.graph, detect_loss(back.graph), test::plain(one), *dev);
  const std::vector<Tensor> want = t.eval_outputs(probe), got = u.eval_outputs(probe);
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(want[i].bytes == got[i].bytes);

  // The loop evaluates the average and the weights it averages (as timm does), on the test set.
  auto set = std::make_shared<ImageSet>();
  set->count = 8;
  set->channels = 3;
  set->rows = set->cols = 32;
  for (int i = 0; i < 8 * 3 * 32 * 32; ++i) set->pixels.push_back(static_cast<uint8_t>(rng()));
  for (int i = 0; i < 8; ++i) set->labels.push_back(i % 10);
  Dataset data;
  data.train = data.test = set;
  RunOptions ro;
  ro.steps = 4;
  ro.eval_every = 2;
  ro.schedule.lr = 0.05;
  ro.eval_unaveraged = true;
  ro.ema_epochs = 4;  // 4 batches an epoch, 2 a step: a time constant of 8 steps
  std::vector<EvalReport> reports;
  Callbacks cb;
  cb.on_eval = [&](const EvalReport& e) { reports.push_back(e); };
  train(t, data, ro, cb);
  REQUIRE(reports.size() == 2);
  for (const EvalReport& e : reports) {
    REQUIRE(e.unaveraged.has_value());
    CHECK(e.unaveraged->count == 8);
    CHECK(e.test.count == 8);
    CHECK(e.unaveraged->loss != e.test.loss);
  }
  CHECK(t.evaluate(*set).loss == doctest::Approx(reports.back().test.loss));
  CHECK(t.options().ema == 0.875);
  CHECK(ema_decay_for(4, 4, 2) == 0.875);
}

TEST_CASE("ema: settings out of range are named") {
  TrainerOptions o;
  o.ema = 1.0;
  CHECK(contains(error_of([&] { o.validate(); }), "--ema must be a decay in (0, 1)"));
  o.ema = 0.0;
  CHECK(contains(error_of([&] { o.validate(); }), "--ema must be a decay in (0, 1)"));
  o.ema.reset();
  o.ema_start = 10;
  CHECK(contains(error_of([&] { o.validate(); }), "--ema-start needs --ema"));
  o.ema = 0.99;
  o.ema_start = -1;
  CHECK(contains(error_of([&] { o.validate(); }), "--ema-start must not be negative"));
}

TEST_CASE("ema: cb-train's --ema: on by default (a quarter epoch), a time constant, a decay, off") {
  SessionOptions o;
  CHECK(o.trainer.ema.has_value());
  CHECK(o.run.ema_epochs == SessionOptions::kEmaEpochs);
  const OptionSpec& spec = find_session_option("ema");
  CHECK(spec.get(o) == "0.25e");
  set_session_option(o, "ema", "2e");
  CHECK(o.run.ema_epochs == 2);
  CHECK(spec.get(o) == "2e");
  set_session_option(o, "ema", "0.99");
  CHECK(*o.trainer.ema == 0.99);
  CHECK(o.run.ema_epochs == 0);
  CHECK(spec.get(o) == "0.99");
  set_session_option(o, "ema", "off");
  CHECK(!o.trainer.ema);
  CHECK(spec.get(o) == "off");
  CHECK(contains(error_of([&] { set_session_option(o, "ema", "-1e"); }), "must be positive"));
  CHECK(contains(error_of([&] { set_session_option(o, "ema", "fast"); }), "--ema"));
}
