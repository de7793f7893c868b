// SMA (sma/trainer.h), with SGD and with AdamW where the optimizer matters: identical replicas
// stay identical; one learner with alpha 0 and mu_z 0 is
// plain SGD bit for bit wherever it runs; z after 3 steps against a hand computation on a one-Gemm
// model; local SGD between synchronisations; the reset to z at a learning-rate drop; two CPU
// devices of 2 learners equal one device of 4 up to fp32 summation order; the overlapped z update;
// the divergence guard naming the learner. The other SMA tests: test_train_loop.cpp,
// test_auto_tuner.cpp, test_collective.cpp, test_cb_train_cli.cpp (helpers in tests/sma_util.h).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <random>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/device.h"
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

namespace {
// max |a - b| and max |b|: two runs that differ only in the fp32 order of a sum.
std::pair<double, double> max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return {diff, scale};
}
// Every local learner's replica, then its velocity (first moment), one after another.
std::vector<float> learner_rows(const Trainer& t) {
  std::vector<float> all;
  for (int l = 0; l < t.local_learners(); ++l) {
    std::vector<float> v = t.replica(l), m = t.velocity(l);
    all.insert(all.end(), v.begin(), v.end());
    all.insert(all.end(), m.begin(), m.end());
  }
  return all;
}
}  // namespace

// ---- the algorithm -----------------------------------------------------------------------------

TEST_CASE("sma: k = 3 identical replicas fed identical data stay bit-identical to one replica") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  for (const OptimizerKind opt : {OptimizerKind::Sgd, OptimizerKind::AdamW})
    for (bool coupled : {false, true}) {
      CAPTURE(optimizer_name(opt));
      CAPTURE(coupled);
      CpuSetup o3 = lenet_options({0}, 1, 3), o1 = lenet_options({0}, 1, 1);
      o3.opts.optimizer = o1.opts.optimizer = opt;
      if (!coupled) o3.opts.alpha = o1.opts.alpha = 0.0;
      o3.opts.lr_scaling = LrScaling::None;  // the same learning rate as the single learner
      CpuTrainer t3(r.graph, loss, o3), t1(r.graph, loss, o1);
      CHECK(t3.total_learners() == 3);
      CHECK(t3.alpha() == (coupled ? 0.5 : 0.0));  // min(2 / 3, 1/2)
      for (int s = 0; s < 6; ++s) {
        std::vector<Batch> one = file_batches(test::mem(data.train), s, 1, 16);
        std::vector<Batch> three = {one[0], one[0], one[0]};
        std::vector<double> l3 = t3.step(three, 0.01);
        std::vector<double> l1 = t1.step(one, 0.01);
        CHECK(l3[0] == l3[1]);
        CHECK(l3[0] == l3[2]);
        if (!coupled) CHECK(l3[0] == l1[0]);
      }
      for (int j = 1; j < 3; ++j) {
        CHECK(t3.replica(j) == t3.replica(0));
        CHECK(t3.velocity(j) == t3.velocity(0));
      }
      if (!coupled) {
        CHECK(t3.replica(0) == t1.replica(0));
        CHECK(t3.velocity(0) == t1.velocity(0));
        CHECK(t3.central() == t1.central());  // alpha 0: nothing moves z
      } else {
        CHECK(t3.replica(0) != t1.replica(0));  // z pulls: not plain SGD any more
      }
    }
}

TEST_CASE("sma: each learner draws its own Dropout masks") {
  std::vector<float> w0(kOut * kIn, 0.5f), b0(kOut, 0.1f), x(2 * kIn, 1.0f);
  CpuSetup o;
  o.opts.batch = 2;
  o.cores = {0};
  o.opts.learners = 3;
  o.opts.alpha = 0.0;
  CpuTrainer t(gemm_graph(w0, b0, true, true), {LossKind::MeanSquaredError, ""}, o);
  const Batch b = gemm_batch(x, {0, 1});
  std::vector<double> l = t.step({b, b, b}, 0.1);
  // Same data and parameters: only the masks differ (64 drawn bits each, equal by chance ~never).
  CHECK((t.replica(0) != t.replica(1) || t.replica(1) != t.replica(2)));
  CHECK((l[0] != l[1] || l[1] != l[2]));
}

TEST_CASE("sma: one learner, alpha 0, mu_z 0 does not depend on where it runs (pinned or not)") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  TrainerOptions to;
  to.batch = 16;
  to.momentum = 0.9;
  to.weight_decay = 5e-4;
  RunOptions ro;
  ro.steps = 20;
  ro.seed = 3;
  ro.test_limit = 200;
  ro.schedule.lr = 0.01;

  auto dev = make_cpu_device(2);  // not pinned, as cb-run's
  CpuTrainer single(r.graph, loss, test::plain(to), *dev);
  RunSummary a = train(single, data, ro);

  CpuSetup so;
  so.opts = test::plain(to);
  so.cores = {0, 1};  // pinned, one learner stream over both cores
  CpuTrainer sma(r.graph, loss, so);
  RunSummary b = train(sma, data, ro);

  REQUIRE(b.steps == 20);
  CHECK(b.losses == a.losses);
  CHECK(sma.replica(0) == single.flat_params());
  CHECK(b.test.correct == a.test.correct);
  CHECK(b.test.loss == a.test.loss);
  // The exported model is the replica itself (alpha 0: the learners' average of one).
  std::map<std::string, Tensor> ta = single.trained_tensors(), tb = sma.trained_tensors();
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, t] : ta) CHECK(tb.at(name).bytes == t.bytes);
}

TEST_CASE("sma: z after 3 steps equals the update computed by hand, for every central rule") {
  // The defaults for K learners: alpha = min(2 / K, 1/2) (paper), 1/4 (elastic), gamma = lr x
  // sqrt(K) (x K/4 for the reset rules); the reset rules' correction is the mean of the stepped
  // learners, and every learner continues from the new z.
  struct Case {
    SmaRule rule;
    int K;
    std::optional<double> eta;
    int64_t sync_every = 1, local_after = 0;
  };
  for (const Case& cs :
       {Case{SmaRule::Paper, 2, {}}, Case{SmaRule::Paper, 8, {}}, Case{SmaRule::Elastic, 8, {}},
        Case{SmaRule::Elastic, 4, 0.6}, Case{SmaRule::SlowMo, 4, {}},
        Case{SmaRule::SlowMo, 2, 0.7, 2}, Case{SmaRule::PostLocal, 4, {}, 2, 2}}) {
    const int K = cs.K;
    CAPTURE(sma_rule_name(cs.rule));
    CAPTURE(K);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> w0(kOut * kIn), b0(kOut);
    for (float& v : w0) v = u(rng);
    for (float& v : b0) v = u(rng);
    Graph g = gemm_graph(w0, b0);
    CpuSetup o;
    o.opts.batch = 2;
    o.opts.momentum = 0.9;
    o.opts.weight_decay = 0.01;
    o.cores = {0};
    o.opts.learners = K;
    o.opts.central_momentum = 0.5;
    o.opts.sma_rule = cs.rule;
    o.opts.outer_lr = cs.eta;
    o.opts.sync_every = cs.sync_every;
    o.opts.local_after = cs.local_after;
    CpuTrainer t(g, {LossKind::MeanSquaredError, ""}, o);
    REQUIRE(t.model().flat_elems() == 32);
    const bool reset = resets_learners(cs.rule);
    const double alpha = cs.rule == SmaRule::Paper     ? (K == 2 ? 0.5 : 0.25)
                         : cs.rule == SmaRule::Elastic ? 0.25
                                                       : 1.0 / K;
    const double eta = cs.eta.value_or(1.0);
    // What z adds of the corrections' sum: all of it (paper, post-local), eta (mean - z).
    const double sum_scale = cs.rule == SmaRule::Elastic  ? eta / (K * alpha)
                             : cs.rule == SmaRule::SlowMo ? eta
                                                          : 1.0;
    CHECK(t.alpha() == alpha);
    // The learners' rate: K/4 (at least 1) for post-local, sqrt(K) for the others.
    const double factor =
        cs.rule == SmaRule::PostLocal ? std::max(K / 4.0, 1.0) : std::sqrt(static_cast<double>(K));
    CHECK(t.lr_factor() == factor);

    // Reference in double: theta_j, v_j, z, z_prev as [W | b] vectors of 15.
    const int n = kOut * kIn + kOut;
    auto pack = [&](const std::vector<float>& flat) {
      std::vector<double> v(n);
      for (int i = 0; i < kOut * kIn; ++i) v[i] = flat[kWOff + i];
      for (int i = 0; i < kOut; ++i) v[kOut * kIn + i] = flat[kBOff + i];
      return v;
    };
    std::vector<double> init(n);
    for (int i = 0; i < kOut * kIn; ++i) init[i] = w0[i];
    for (int i = 0; i < kOut; ++i) init[kOut * kIn + i] = b0[i];
    std::vector<std::vector<double>> th(K, init), vel(K, std::vector<double>(n, 0));
    std::vector<double> z = init, zp = init;
    const double lr = 0.1, gamma = lr * factor, mu = 0.9, wd = 0.01, muz = 0.5;

    for (int s = 0; s < 3; ++s) {
      std::vector<Batch> batches;
      std::vector<std::vector<float>> xs;
      std::vector<std::vector<int64_t>> ls;
      for (int j = 0; j < K; ++j) {
        std::vector<float> x(2 * kIn);
        for (float& v : x) v = u(rng);
        std::vector<int64_t> l = {static_cast<int64_t>(rng() % kOut),
                                  static_cast<int64_t>(rng() % kOut)};
        batches.push_back(gemm_batch(x, l));
        xs.push_back(x);
        ls.push_back(l);
      }
      std::vector<double> losses = t.step(batches, lr);
      std::vector<double> sum_c(n, 0);
      const int64_t period =
          cs.rule == SmaRule::PostLocal && s < cs.local_after ? 1 : cs.sync_every;
      const bool sync = (s + 1) % period == 0;
      for (int j = 0; j < K; ++j) {
        // Known gradients: L = mean over [2,3] of (y - onehot)^2, dL/dy = 2 (y - t) / 6.
        std::vector<double> grad(n, 0);
        double loss = 0;
        for (int e = 0; e < 2; ++e)
          for (int c = 0; c < kOut; ++c) {
            double y = th[j][kOut * kIn + c];
            for (int i = 0; i < kIn; ++i) y += xs[j][e * kIn + i] * th[j][c * kIn + i];
            const double d = y - (ls[j][e] == c ? 1.0 : 0.0);
            loss += d * d / 6;
            const double dy = 2 * d / 6;
            for (int i = 0; i < kIn; ++i) grad[c * kIn + i] += dy * xs[j][e * kIn + i];
            grad[kOut * kIn + c] += dy;
          }
        CHECK(losses[j] == doctest::Approx(loss).epsilon(1e-5));
        for (int i = 0; i < n; ++i) {
          const double d = grad[i] + wd * th[j][i];
          vel[j][i] = s == 0 ? d : mu * vel[j][i] + d;
          const double stepped = th[j][i] - gamma * vel[j][i];
          const double c = sync ? alpha * ((reset ? stepped : th[j][i]) - z[i]) : 0.0;
          th[j][i] = reset ? stepped : stepped - c;
          sum_c[i] += c;
        }
      }
      for (int i = 0; sync && i < n; ++i) {
        const double nz = z[i] + sum_scale * sum_c[i] + muz * (z[i] - zp[i]);
        zp[i] = z[i];
        z[i] = nz;
        if (reset)
          for (int j = 0; j < K; ++j) th[j][i] = nz;
      }
      if (s == 0 && !reset) {
        // Step 1: z' = z + sum of c_j with theta_j = z before the step: z does not move.
        CHECK(pack(t.central()) == init);
      }
    }
    std::vector<double> got = pack(t.central());
    double scale = 0;
    for (double v : z) scale = std::max(scale, std::abs(v));
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(std::abs(got[i] - z[i]) <= 1e-5 * scale);
      for (int j = 0; j < K; ++j) CHECK(std::abs(pack(t.replica(j))[i] - th[j][i]) <= 1e-5 * scale);
    }
    CHECK(got != init);
    // Padding stays zero.
    std::vector<float> flat = t.central();
    for (int i = kOut * kIn; i < kBOff; ++i) CHECK(flat[i] == 0.0f);
    for (int i = kBOff + kOut; i < 32; ++i) CHECK(flat[i] == 0.0f);
  }
}

TEST_CASE(
    "sma: the learners' rate: sqrt(K) up to 8x (K = 64), then 64/sqrt(K); K/4 to 16x, 1024/K") {
  CHECK(lr_scale(LrScaling::Sqrt, 1) == 1);
  CHECK(lr_scale(LrScaling::Sqrt, 16) == 4);
  CHECK(lr_scale(LrScaling::Sqrt, 64) == 8);
  CHECK(lr_scale(LrScaling::Sqrt, 256) == 4);  // 16x: a learner at batch 16 dies (docs/sma.md)
  CHECK(lr_scale(LrScaling::Sqrt, 4096) == 1);
  CHECK(lr_scale(LrScaling::Linear, 256) == 256);
  CHECK(lr_scale(LrScaling::None, 256) == 1);
  // The reset rules' mean is large-batch SGD: K/4 up to 16x at K = 64, then 1024/K (docs/sma.md:
  // "Central rules": at K = 256, 16x left the learners dead for epochs where 4x did not).
  CHECK(lr_scale(LrScaling::Quarter, 2) == 1);
  CHECK(lr_scale(LrScaling::Quarter, 16) == 4);
  CHECK(lr_scale(LrScaling::Quarter, 64) == 16);
  CHECK(lr_scale(LrScaling::Quarter, 256) == 4);
  CHECK(lr_scale(LrScaling::Quarter, 4096) == 1);
  CHECK(lr_scale(LrScaling::Auto, 64, SmaRule::Paper) == 8);
  CHECK(lr_scale(LrScaling::Auto, 64, SmaRule::Elastic) == 8);
  CHECK(lr_scale(LrScaling::Auto, 64, SmaRule::PostLocal) == 16);
  CHECK(lr_scale(LrScaling::Auto, 64, SmaRule::SlowMo) == 8);  // its outer momentum doubles it
}

TEST_CASE("sma: --sync-every 3 is local SGD for two steps, then the correction and z update") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  CpuSetup o;
  o.opts.batch = 2;
  o.cores = {0};
  o.opts.learners = 2;
  o.opts.sync_every = 3;
  CpuSetup plain = o;
  plain.opts.sync_every = 1;
  plain.opts.alpha = 0.0;
  CpuTrainer t(gemm_graph(w0, b0), {LossKind::MeanSquaredError, ""}, o),
      sgd(gemm_graph(w0, b0), {LossKind::MeanSquaredError, ""}, plain);
  const std::vector<float> z0 = t.central();
  for (int s = 0; s < 3; ++s) {
    std::vector<Batch> b;
    for (int j = 0; j < 2; ++j) {
      std::vector<float> x(2 * kIn);
      for (float& v : x) v = u(rng);
      b.push_back(gemm_batch(x, {static_cast<int64_t>(j), 2}));
    }
    t.step(b, 0.1);
    sgd.step(b, 0.1);
    if (s < 2) {  // local steps: z untouched, replicas exactly plain SGD
      CHECK(t.central() == z0);
      CHECK(t.replica(0) == sgd.replica(0));
      CHECK(t.replica(1) == sgd.replica(1));
    }
  }
  CHECK(t.central() != z0);  // step 3 synchronised
  CHECK(t.replica(0) != sgd.replica(0));
}

TEST_CASE("sma: every replica is reset to z (velocity zeroed) when the learning rate drops") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  Graph g = gemm_graph(w0, b0);
  const Dataset data = tiny_data(rng);
  CpuSetup o;
  o.opts.batch = 2;
  o.cores = {0};
  o.opts.learners = 2;
  CpuTrainer t(g, {LossKind::MeanSquaredError, ""}, o);
  RunOptions ro;
  ro.epochs = 3;  // 8 batches per epoch, 2 per step: 4 steps per epoch
  ro.schedule.kind = LrScheduleKind::Step;
  ro.schedule.lr = 0.1;
  ro.schedule.gamma = 0.5;
  ro.schedule.step_size = 1;
  std::vector<int64_t> resets;
  std::vector<double> rates;
  Callbacks cb;
  cb.on_reset = [&](int64_t step, double lr) {
    resets.push_back(step);
    rates.push_back(lr);
    for (int j = 0; j < t.total_learners(); ++j) {
      CHECK(t.replica(j) == t.central());
      std::vector<float> v = t.velocity(j);
      CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    }
  };
  RunSummary s = train(t, data, ro, cb);
  CHECK(s.steps == 12);
  CHECK(resets == std::vector<int64_t>{4, 8});  // before steps 5 and 9 (0-based 4, 8)
  REQUIRE(rates.size() == 2);
  CHECK(rates[0] == doctest::Approx(0.05));
  CHECK(rates[1] == doctest::Approx(0.025));
  // Replicas have moved away from z again since the last reset.
  CHECK(t.replica(0) != t.central());

  // A constant schedule never resets; a rising one (gamma > 1) does not either.
  resets.clear();
  ro.schedule.gamma = 2;
  train(t, data, ro, cb);
  CHECK(resets.empty());

  // alpha 0: z never moves, so there is nothing to reset to; one such learner (mu_z 0) stays plain
  // SGD (TrainerOptions::plain on one given device) bit for bit across the drops, momentum kept as
  // PyTorch keeps it.
  ro.schedule.gamma = 0.5;
  o.opts.learners = 1;
  o.opts.alpha = 0.0;
  o.opts.central_momentum = 0;
  CpuTrainer plain(g, {LossKind::MeanSquaredError, ""}, o);
  RunSummary ps = train(plain, data, ro, cb);
  CHECK(resets.empty());
  auto dev = make_cpu_device(1);
  CpuTrainer single(g, {LossKind::MeanSquaredError, ""}, test::plain(o.opts), *dev);
  RunSummary rs = train(single, data, ro);
  CHECK(ps.losses == rs.losses);
  CHECK(plain.replica(0) == single.flat_params());
}

TEST_CASE("sma: cpu:2 with 2 learners each equals cpu with 4 learners, up to fp32 sum order") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  for (const OptimizerKind opt : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
    CAPTURE(optimizer_name(opt));
    CpuSetup so = lenet_options({0, 1}, 2, 2), oo = lenet_options({0, 1}, 1, 4);
    so.opts.optimizer = oo.opts.optimizer = opt;
    CpuTrainer two(r.graph, loss, so);
    CpuTrainer one(r.graph, loss, oo);
    CHECK(two.devices() == 2);
    CHECK(two.device(0).caps().cores == 1);
    CHECK(two.device(1).caps().name == "cpu:1");
    CHECK(two.total_learners() == 4);
    CHECK(two.alpha() == 0.5);  // min(2 / 4, 1/2)
    CHECK(one.alpha() == 0.5);
    CHECK(two.lr_factor() == 2);  // sqrt(4)
    RunOptions ro;
    ro.steps = 15;
    ro.seed = 9;
    ro.test_limit = 100;
    RunSummary a = train(two, data, ro), b = train(one, data, ro);
    // The same data assignment and the same gradients at step 1 (bit for bit); afterwards the
    // device sums (c0 + c1) + (c2 + c3) and the single sum ((c0 + c1) + c2) + c3 round apart.
    CHECK(a.losses[0] == b.losses[0]);
    CHECK(two.central(0) == two.central(1));  // every device's copy of z is identical
    std::vector<float> za = two.central(), zb = one.central();
    const auto [diff, scale] = max_diff(za, zb);
    MESSAGE("cpu:2 x 2 vs cpu x 4 after 15 steps: max |dz| " << diff << " (max |z| " << scale
                                                             << ")");
    CHECK(diff <= 1e-5 * scale);  // fp32 summation order only: ~1e-7 relative observed
    CHECK(za != two.replica(0));
  }
}

TEST_CASE("sma: every central rule: cpu:2 x 2 learners equals cpu x 4 up to sum order") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  for (const SmaRule rule : {SmaRule::Elastic, SmaRule::SlowMo, SmaRule::PostLocal}) {
    CAPTURE(sma_rule_name(rule));
    CpuSetup so = lenet_options({0, 1}, 2, 2), oo = lenet_options({0, 1}, 1, 4);
    for (CpuSetup* c : {&so, &oo}) {
      c->opts.sma_rule = rule;
      c->opts.sync_every = rule == SmaRule::Elastic ? 1 : 3;
      if (rule == SmaRule::PostLocal) c->opts.local_after = 6;
    }
    CpuTrainer two(r.graph, loss, so), one(r.graph, loss, oo);
    RunOptions ro;
    ro.steps = 15;
    ro.seed = 9;
    ro.test_limit = 100;
    RunSummary a = train(two, data, ro), b = train(one, data, ro);
    CHECK(a.losses[0] == b.losses[0]);
    CHECK(two.central(0) == two.central(1));
    const std::vector<float> z0 = two.central(), zb = one.central();
    if (resets_learners(rule)) {  // step 15 synchronised: every learner is z
      CHECK(two.replica(0) == z0);
      CHECK(two.replica(3) == z0);
      CHECK(one.replica(2) == zb);
    }
    const auto [diff, scale] = max_diff(z0, zb);
    CHECK(diff <= 1e-5 * scale);
    CHECK(diff < scale);
  }
}

TEST_CASE("sma: overlapping the z update with the next step is bit-identical to not overlapping") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  data.train = std::make_shared<ImageSet>(
      test::mem(data.train).head(192));  // 12 batches an epoch: the drop at epoch 1 comes mid-run
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  struct Config {
    int devices, learners;
    int64_t sync_every;
  };
  for (const OptimizerKind opt : {OptimizerKind::Sgd, OptimizerKind::AdamW})
    for (const Config c : {Config{1, 3, 1}, Config{2, 2, 2}}) {
      CAPTURE(optimizer_name(opt));
      CAPTURE(c.devices);
      CAPTURE(c.learners);
      std::vector<std::vector<float>> z, reps;
      std::vector<std::vector<double>> losses;
      std::vector<double> accuracy;
      for (const bool overlap : {false, true}) {
        CpuSetup s = lenet_options({0, 1}, c.devices, c.learners);
        s.opts.optimizer = opt;
        s.opts.sync_every = c.sync_every;
        s.opts.overlap_sync = overlap;
        CpuTrainer t(r.graph, loss, s);
        RunOptions ro;
        ro.steps = 12;
        ro.seed = 4;
        ro.eval_every = 5;  // evaluations read z between overlapped steps
        ro.test_limit = 200;
        ro.schedule.kind = LrScheduleKind::MultiStep;  // the drop resets the replicas to z
        ro.schedule.milestones = {1};
        RunSummary sum = train(t, data, ro);
        z.push_back(t.central(c.devices - 1));
        reps.push_back(learner_rows(t));
        losses.push_back(sum.losses);
        accuracy.push_back(sum.test.accuracy);
        CHECK(t.timing().steps == 12);
        CHECK(t.timing().phase_b_share() > 0);
      }
      CHECK(z[0] == z[1]);
      CHECK(reps[0] == reps[1]);
      CHECK(losses[0] == losses[1]);
      CHECK(accuracy[0] == accuracy[1]);
    }
}

TEST_CASE(
    "sma: evaluation runs in learner 0's arena between steps and changes nothing of training") {
  if (!test::need(fs::path(kFashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset data = load_idx_dataset(kFashion);
  data.train = std::make_shared<ImageSet>(test::mem(data.train).head(192));
  ImportResult r = import_model(kLenet);
  const LossSpec loss = detect_loss(r.graph);
  for (const OptimizerKind opt : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
    CAPTURE(optimizer_name(opt));
    std::vector<std::vector<float>> reps;
    std::vector<std::vector<double>> losses;
    std::vector<EvalResult> evals;
    for (const int64_t every : {0, 2}) {
      CpuSetup s = lenet_options({0, 1}, 1, 2);
      s.opts.optimizer = opt;
      CpuTrainer t(r.graph, loss, s);
      // The graphs' copies of the initial weights are gone once z holds them.
      for (const FlatSlot& p : t.model().param_slots())
        CHECK(!t.model().training_graph().graph.value(p.value).data);
      for (const FlatSlot& p : t.model().param_slots())
        CHECK(!t.model().eval_graph().value(p.value).data);
      RunOptions ro;
      ro.steps = 8;
      ro.seed = 4;
      ro.eval_every = every;  // evaluations write learner 0's arena between its steps
      ro.test_limit = 200;
      RunSummary sum = train(t, data, ro);
      CHECK(t.eval_own_arena_bytes() == 0);
      reps.push_back(learner_rows(t));
      losses.push_back(sum.losses);
      evals.push_back(sum.test);
    }
    CHECK(reps[0] == reps[1]);
    CHECK(losses[0] == losses[1]);
    CHECK(evals[0].loss == evals[1].loss);
    CHECK(evals[0].correct == evals[1].correct);
    CHECK(evals[0].count == 200);

    // An evaluation batch whose plan does not fit the learner's arena gets its own, and scores
    // the same examples alike.
    CpuSetup s = lenet_options({0, 1}, 1, 2);
    s.opts.optimizer = opt;
    s.opts.eval_batch = 200;
    CpuTrainer t(r.graph, loss, s);
    RunOptions ro;
    ro.steps = 8;
    ro.seed = 4;
    ro.test_limit = 200;
    RunSummary sum = train(t, data, ro);
    CHECK(t.eval_own_arena_bytes() > 0);
    CHECK(sum.test.correct == evals[0].correct);
    CHECK(sum.test.loss == doctest::Approx(evals[0].loss).epsilon(1e-6));
  }
}

// ---- divergence ---------------------------------------------------------------------------------

TEST_CASE("sma: divergence stops naming the step and the learner; nothing is updated") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut), x(2 * kIn);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  for (float& v : x) v = u(rng);
  CpuSetup o3;
  o3.opts.batch = 2;
  o3.cores = {0};
  o3.opts.learners = 3;
  CpuTrainer t(gemm_graph(w0, b0), {LossKind::MeanSquaredError, ""}, o3);
  const Batch good = gemm_batch(x, {0, 1});
  t.step({good, good, good}, 0.1);
  const std::vector<float> z = t.central(), r1 = t.replica(1);
  Batch bad = good;
  bad.inputs[0].data<float>()[5] = std::nanf("");
  std::string e = error_of([&] { t.step({good, good, bad}, 0.1); });
  CHECK(contains(e, "diverged at step 2"));
  CHECK(contains(e, "learner 2"));
  CHECK(contains(e, "NaN"));
  CHECK(t.central() == z);
  CHECK(t.replica(1) == r1);

  // Finite losses but a z that overflows: y = x W^T (no bias), W0 = 0, mu = 0, mu_z = 0.9. Step 1
  // (x = 100 e_0, label 0) moves W[0][0] of both replicas to a = lr * 200/3 = 2.5e38; steps 2 and
  // 3 feed x = 0 (loss 1/3 whatever W): z goes 0 -> a -> 1.4 a, which overflows. Without overlap
  // step 3 throws; with overlap its z update is still running when step 3 returns, and the next
  // call that needs it (here step 4, before updating anything) throws naming step 3.
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    CpuSetup o;
    o.opts.batch = 2;
    o.opts.momentum = 0;
    o.opts.overlap_sync = overlap;
    o.opts.lr_scaling = LrScaling::None;
    o.cores = {0};
    o.opts.learners = 2;
    CpuTrainer g(gemm_graph(std::vector<float>(kOut * kIn, 0), {}, false),
                 {LossKind::MeanSquaredError, ""}, o);
    std::vector<float> x1(8, 0);
    x1[0] = x1[4] = 100;
    const Batch first = gemm_batch(x1, {0, 0}), zero = gemm_batch(std::vector<float>(8, 0), {1, 1});
    const float lr = 3.75e36f;
    g.step({first, first}, lr);
    CHECK(g.replica(0)[0] == doctest::Approx(2.5e38));
    g.step({zero, zero}, lr);
    CHECK(g.central()[0] == doctest::Approx(2.5e38));
    if (overlap) {
      g.step({zero, zero}, lr);
      e = error_of([&] { g.step({zero, zero}, lr); });
    } else {
      e = error_of([&] { g.step({zero, zero}, lr); });
    }
    CHECK(contains(e, "diverged at step 3"));
    CHECK(contains(e, "central model z has 1 non-finite value"));
    CHECK(contains(e, "every learner's replica is finite"));
    CHECK(g.steps_done() == 3);  // step 4 updated nothing
  }
}
