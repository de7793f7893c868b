// The session layer: settings parsed and validated in one place (with cb-train's flag names in
// every message), the checkpoint schedule, and a whole training session run in process, as
// cb-train runs it, checked against its outputs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "autodiff/autodiff.h"
#include "session/option_table.h"
#include "session/options.h"
#include "session/train_session.h"
#include "sma/checkpoint.h"
#include "test_util.h"

using namespace cb;
using test::contains;
using test::error_of;

namespace {

SessionOptions valid() {
  SessionOptions o;
  o.model = "model.onnx";
  o.data = "data";
  o.threads = 1;
  return o;
}

std::string invalid(const std::function<void(SessionOptions&)>& change) {
  SessionOptions o = valid();
  change(o);
  return error_of([&] { o.validate(); });
}

}  // namespace

TEST_CASE("session: the text forms of cb-train's settings") {
  CHECK(!parse_learners("auto"));
  CHECK(parse_learners("4") == 4);
  CHECK(contains(error_of([] { parse_learners("0"); }), "--learners must be at least 1"));
  CHECK(contains(error_of([] { parse_learners("2x"); }), "--learners '2x'"));
  CHECK(parse_bytes("1234") == 1234);
  CHECK(parse_bytes("64M") == int64_t{64} << 20);
  CHECK(parse_bytes("2G") == int64_t{2} << 30);
  CHECK(contains(error_of([] { parse_bytes("3X"); }), "unknown unit 'X'"));
  CHECK(contains(error_of([] { parse_bytes("-1"); }), "--memory-budget must be positive"));
  CHECK(parse_image_size("48x192") == std::pair<int64_t, int64_t>{48, 192});
  CHECK(contains(error_of([] { parse_image_size("48x"); }), "--image-size '48x'"));
  CHECK(contains(error_of([] { parse_optimizer("adam"); }), "choices: sgd, adamw"));
  CHECK(parse_optimizer("adamw") == OptimizerKind::AdamW);
  ImportOptions io;
  add_size_options(io, {"seq=32"}, {"x=1x3x8x8"});
  CHECK(io.dims.at("seq") == 32);
  CHECK(io.input_shapes.at("x") == std::vector<int64_t>{1, 3, 8, 8});
  CHECK(contains(error_of([&] { add_size_options(io, {"seq"}, {}); }), "--dim 'seq'"));
}

TEST_CASE("session: every setting is validated in one place, named by its flag") {
  CHECK(error_of([] { valid().validate(); }) == "(no error)");
  // The data may come later (the API's fit); cb-train's run needs --data.
  CHECK(invalid([](auto& o) { o.data.clear(); }) == "(no error)");
  SessionOptions no_data = valid();
  no_data.data.clear();
  no_data.model = std::string(CB_SOURCE_DIR) + "/models/mlp_op17.onnx";
  no_data.handle_signals = false;
  CHECK(contains(error_of([&] { TrainSession(no_data).run(); }), "--data is required"));
  CHECK(contains(invalid([](auto& o) { o.trainer.batch = 0; }), "--batch-size must be positive"));
  CHECK(contains(invalid([](auto& o) { o.trainer.momentum = 1; }), "--momentum"));
  CHECK(contains(invalid([](auto& o) { o.trainer.alpha = 2.0; }), "--alpha"));
  CHECK(contains(invalid([](auto& o) { o.trainer.sync_every = 0; }), "--sync-every"));
  // The central rules' settings belong to their rules.
  CHECK(contains(invalid([](auto& o) {
                   o.trainer.sma_rule = SmaRule::SlowMo;
                   o.trainer.alpha = 0.1;
                 }),
                 "--alpha is the pull of the paper and elastic rules; --sma-rule slowmo resets"));
  CHECK(contains(invalid([](auto& o) { o.trainer.outer_lr = 0.5; }),
                 "--outer-lr is the central step of --sma-rule elastic and slowmo, not of the "
                 "default rules"));
  CHECK(contains(invalid([](auto& o) {
                   o.trainer.sma_rule = SmaRule::SlowMo;
                   o.trainer.outer_lr = 0;
                 }),
                 "--outer-lr must be in (0, 4], got 0"));
  CHECK(contains(invalid([](auto& o) {
                   o.trainer.sma_rule = SmaRule::Paper;
                   o.trainer.local_after = 10;
                 }),
                 "--local-after is the switch of --sma-rule post-local, not of paper"));
  CHECK(contains(invalid([](auto& o) { o.trainer.central_momentum = 1.0; }),
                 "--central-momentum must be in [0, 1), got 1"));
  CHECK(contains(error_of([] { parse_sma_rule("easgd"); }),
                 "unknown --sma-rule 'easgd' (choices: paper, elastic, slowmo, post-local)"));
  // Without --sma-rule: the paper's rule below 16 learners in all (and with --alpha), post-local
  // from 16.
  TrainerOptions t;
  CHECK(t.rule(8) == SmaRule::Paper);
  CHECK(t.rule(16) == SmaRule::PostLocal);
  CHECK(t.mu_z(8) == 0.9);
  CHECK(t.mu_z(16) == 0.0);
  t.alpha = 0.1;
  CHECK(t.rule(64) == SmaRule::Paper);
  CHECK(contains(invalid([](auto& o) { o.run.epochs = 0; }), "--epochs must be positive"));
  CHECK(contains(invalid([](auto& o) { o.run.schedule.lr = 0; }), "--lr"));
  CHECK(contains(invalid([](auto& o) { o.run.target_accuracy = 2; }), "--target-accuracy"));
  CHECK(contains(invalid([](auto& o) { o.run.tuner.windows = 0; }), "--tuner-windows"));
  // The tuner's settings matter only when it runs.
  CHECK(invalid([](auto& o) {
          o.run.tuner.windows = 0;
          o.auto_learners = false;
        }) == "(no error)");
  CHECK(contains(invalid([](auto& o) { o.loss = "hinge"; }), "unknown --loss 'hinge'"));
  for (const char* loss : {"l1", "huber", "bce", "output:loss"})
    CHECK(invalid([&](auto& o) { o.loss = loss; }) == "(no error)");
  CHECK(contains(invalid([](auto& o) { o.label_smoothing = 1; }), "--label-smoothing"));
  CHECK(contains(invalid([](auto& o) { o.huber_delta = 0; }), "--huber-delta"));
  CHECK(contains(invalid([](auto& o) { o.class_axis = 0; }), "--class-axis"));
  CHECK(contains(invalid([](auto& o) { o.devices = "tpu"; }), "--devices 'tpu'"));
  CHECK(contains(invalid([](auto& o) { o.output_training = true; }),
                 "--output-training needs --output"));
  CHECK(contains(invalid([](auto& o) { o.checkpoint.keep = 0; }), "--keep must be at least 1"));
  CHECK(contains(invalid([](auto& o) { o.checkpoint.every = "5"; }),
                 "--checkpoint-every needs --checkpoint-dir"));
  // SMA takes AdamW as it takes SGD: each learner its own moments, the central model the weights.
  CHECK(invalid([](auto& o) {
          o.trainer.optimizer = OptimizerKind::AdamW;
          o.auto_learners = false;
          o.trainer.learners = 4;
          o.devices = "cpu:2";
        }) == "(no error)");
  CHECK(contains(invalid([](auto& o) { o.trainer.beta1 = 1; }),
                 "--betas must be two values in [0, 1), such as 0.9,0.999, got 1,0.999"));
  CHECK(contains(invalid([](auto& o) { o.trainer.beta2 = -0.1; }), "--betas must be"));
  CHECK(contains(invalid([](auto& o) { o.trainer.eps = 0; }), "--eps must be positive"));
  CHECK(contains(invalid([](auto& o) { o.trainer.weight_decay = INFINITY; }), "--weight-decay"));
  CHECK(contains(invalid([](auto& o) { o.trainer.clip_grad_norm = -1; }),
                 "--clip-grad-norm must be a positive norm, such as 1.0, got -1"));
  CHECK(contains(invalid([](auto& o) { o.trainer.clip_grad_norm = NAN; }), "--clip-grad-norm"));
}

TEST_CASE("session: when checkpoints are due") {
  CHECK(CheckpointEvery::parse("100").unit == 's');
  CHECK(CheckpointEvery::parse("0.5e").n == 0.5);
  CHECK(CheckpointEvery::parse("10m").unit == 'm');
  CHECK(contains(error_of([] { CheckpointEvery::parse("1.5"); }), "a whole number"));
  CHECK(contains(error_of([] { CheckpointEvery::parse("2h"); }), "expected N (steps)"));

  test::TempDir dir("ckpt_policy");
  CheckpointOptions co;
  co.dir = (dir.path / "ck").string();
  co.every = "3";
  CheckpointPolicy steps(co);
  CHECK(std::filesystem::is_directory(co.dir));  // made before training
  LoopState loop;
  steps.start(loop, 10, {});
  std::vector<int64_t> due;
  for (loop.step = 1; loop.step <= 7; ++loop.step)
    if (steps.due(loop)) due.push_back(loop.step);
  CHECK(due == std::vector<int64_t>{3, 6});

  // Every half epoch of 10 batches, counted from a resumed position (batch 12): due when the
  // batches consumed cross 15 and 20, not at once.
  co.every = "0.5e";
  co.dir = (dir.path / "ck2").string();  // `steps` holds the lock on the first folder
  CheckpointPolicy epochs(co);
  loop.consumed = 12;
  epochs.start(loop, 10, {});
  due.clear();
  for (loop.consumed = 13; loop.consumed <= 22; ++loop.consumed)
    if (epochs.due(loop)) due.push_back(loop.consumed);
  CHECK(due == std::vector<int64_t>{15, 20});

  co.dir.clear();
  co.every.clear();
  CheckpointPolicy none(co);
  CHECK(!none.enabled());
  CHECK(!none.due(loop));
}

TEST_CASE("session: a whole run in process, as cb-train runs it") {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  const std::string model = std::string(CB_SOURCE_DIR) + "/models/mlp_op17.onnx";
  if (!test::need(data, "Fashion-MNIST (apt-get install dataset-fashion-mnist)")) return;
  test::TempDir dir("session_run");
  SessionOptions o;
  o.program = "test-session";
  o.model = model;
  o.data = data;
  o.threads = 1;
  o.auto_learners = false;
  o.trainer.learners = 2;
  o.run.steps = 30;
  o.run.test_limit = 500;
  o.output = (dir.path / "trained.onnx").string();
  o.metrics = (dir.path / "metrics.jsonl").string();
  o.checkpoint.dir = (dir.path / "ck").string();
  o.handle_signals = false;
  TrainSession s(o);
  CHECK(s.who() == "test-session");
  CHECK(s.run() == 0);
  CHECK(std::filesystem::file_size(o.output) > 0);
  const std::string metrics = test::read_text(o.metrics);
  CHECK(contains(metrics, "\"type\":\"config\""));
  CHECK(contains(metrics, "\"type\":\"summary\""));
  CHECK(list_checkpoints(o.checkpoint.dir).size() == 1);  // the one at the end

  // Resuming the finished run continues from its last step: 10 more steps.
  SessionOptions more = o;
  more.run.steps = 40;
  more.checkpoint.resume = o.checkpoint.dir;
  more.metrics.clear();
  CHECK(TrainSession(more).run() == 0);
  const auto cks = list_checkpoints(o.checkpoint.dir);
  REQUIRE(cks.size() == 2);
  CHECK(contains(cks.back(), "ckpt-0000000040"));

  // A different batch size cannot resume it: named, with the checkpoint's command.
  SessionOptions other = more;
  other.trainer.batch = 8;
  CHECK(contains(error_of([&] { TrainSession(other).run(); }), "--batch-size: 8 (checkpoint: 16)"));
}

TEST_CASE("session: a run builds its training graph once") {
  // Matching the data to the model needs what it takes (its FeedSpec), not its training graph:
  // autodiff and planning run once, for the trainer.
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!test::need(data, "Fashion-MNIST (apt-get install dataset-fashion-mnist)")) return;
  SessionOptions o;
  o.program = "test-session";
  o.model = std::string(CB_SOURCE_DIR) + "/models/lenet5_op17.onnx";
  o.data = data;
  o.threads = 1;
  o.auto_learners = false;
  o.run.steps = 2;
  o.run.test_limit = 64;
  o.handle_signals = false;
  const int64_t before = training_graphs_built();
  CHECK(TrainSession(o).run() == 0);
  CHECK(training_graphs_built() - before == 1);
}

TEST_CASE("session: the option table sets what cb-train's flags set, and round-trips") {
  // Every option's default text sets the default again; names with underscores or dashes work.
  for (const OptionSpec& s : session_options()) {
    SessionOptions o;
    const std::string before = s.get(o);
    if (s.kind == OptionSpec::Kind::Flag || !before.empty()) {
      set_session_option(o, s.name, s.kind == OptionSpec::Kind::Flag ? "false" : before);
      CHECK_MESSAGE(s.get(o) == (s.kind == OptionSpec::Kind::Flag ? "false" : before), s.name);
    }
  }
  SessionOptions o;
  set_session_option(o, "batch_size", "32");
  set_session_option(o, "--lr", "0.5");
  set_session_option(o, "b", "64");
  set_session_option(o, "learners", "3");
  set_session_option(o, "no-shuffle", "true");
  set_session_option(o, "freeze", "conv*");
  set_session_option(o, "freeze", "bn*");
  set_session_option(o, "mean", "0.5,0.25,0.125");
  set_session_option(o, "image-size", "48x64");
  set_session_option(o, "dim", "seq=12");
  set_session_option(o, "memory-budget", "64M");
  CHECK(o.trainer.batch == 64);
  CHECK(o.run.schedule.lr == 0.5);
  CHECK((!o.auto_learners && o.trainer.learners == 3));
  CHECK(!o.run.shuffle);
  CHECK(o.freeze == std::vector<std::string>{"conv*", "bn*"});
  CHECK(o.run.transforms.mean == std::vector<float>{0.5f, 0.25f, 0.125f});
  CHECK(o.image_size == std::pair<int64_t, int64_t>{48, 64});
  CHECK(o.import.dims.at("seq") == 12);
  CHECK(o.trainer.memory_budget == 64 << 20);
  CHECK(contains(error_of([&] { set_session_option(o, "learning-rate", "1"); }),
                 "unknown option 'learning-rate'"));
  CHECK(contains(error_of([&] { set_session_option(o, "lr", "fast"); }),
                 "--lr 'fast': expected a number"));
  CHECK(contains(error_of([&] { set_session_option(o, "mean", "0.5,x"); }), "--mean 'x'"));
  CHECK(contains(error_of([&] { set_session_option(o, "data", "x"); }), "given on its own"));
}
