// SMA (sma/trainer.h, sma/train_loop.h): identical replicas stay identical; one learner with
// alpha 0 and mu_z 0 is plain SGD bit for bit (and resumes bit for bit from a TrainState); z after
// 3 steps against a hand computation on a one-Gemm model; the reset to z at a learning-rate drop;
// two CPU devices of 2 learners equal one device of 4 up to fp32 summation order; the auto-tuner's
// decisions on synthetic throughput; the divergence guard naming the learner; cb-train end to end
// (metrics, output, divergence).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/data/idx_dataset.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/graph_builder.h"
#include "sma/auto_tuner.h"
#include "sma/train_loop.h"
#include "sma/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"
#include "viz/report.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

const char* const kFashion = "/usr/share/datasets/fashion-mnist";
const std::string kLenet = CB_SOURCE_DIR "/models/lenet5_op17.onnx";

using test::contains;
using test::CpuSetup;
using test::CpuTrainer;
using test::error_of;

CpuSetup lenet_options(std::vector<int> cores, int devices, int learners) {
  CpuSetup o;
  o.opts.batch = 16;
  o.opts.momentum = 0.9;
  o.cores = std::move(cores);
  o.devices = devices;
  o.opts.learners = learners;
  return o;
}

// Batches `first`, `first + 1`, ... of the training set in file order.
std::vector<Batch> file_batches(const ImageSet& set, int64_t first, int count, int64_t batch) {
  std::vector<Batch> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) set.slice((first + i) * batch, batch, v[i].images, v[i].labels);
  return v;
}

// ---- the one-Gemm model: y = x W^T + b, x [N,4], W [3,4], b [3], MSE against one-hot labels ----

constexpr int kIn = 4, kOut = 3;

Graph gemm_graph(const std::vector<float>& w, const std::vector<float>& b, bool bias = true,
                 bool dropout = false) {
  Graph g;
  g.opset = kEmitOpset;
  g.ir_version = 8;
  Value x;
  x.name = "x";
  x.kind = ValueKind::Input;
  x.shape = {Dim::N(), Dim::of(kIn)};
  x.shape_known = true;
  ValueId xi = g.add_value(x);
  g.inputs.push_back(xi);
  auto param = [&](const std::string& name, std::vector<int64_t> dims,
                   const std::vector<float>& d) {
    Value v;
    v.name = name;
    v.kind = ValueKind::Parameter;
    v.initializer = true;
    v.shape = shape_of(dims);
    v.shape_known = true;
    Tensor t;
    t.dtype = DType::F32;
    t.dims = dims;
    t.bytes.resize(d.size() * sizeof(float));
    std::memcpy(t.bytes.data(), d.data(), t.bytes.size());
    v.data = std::make_shared<Tensor>(std::move(t));
    return g.add_value(std::move(v));
  };
  ValueId wi = param("W", {kOut, kIn}, w);
  std::vector<ValueId> in = {xi, wi};
  if (bias) in.push_back(param("b", {kOut}, b));
  GraphBuilder gb(g, "t");
  if (dropout) in[0] = gb.emit("Dropout", {xi}, {}, 2)[0];  // ratio 0.5, mask for the gradient
  ValueId y = gb.op("Gemm", in, {{"transB", int64_t{1}}});
  g.value(y).name = "logits";
  g.outputs = {y};
  return g;
}

Batch gemm_batch(const std::vector<float>& x, const std::vector<int64_t>& labels) {
  Batch b;
  const auto n = static_cast<int64_t>(labels.size());
  b.images.dtype = DType::F32;
  b.images.dims = {n, kIn};
  b.images.bytes.resize(x.size() * sizeof(float));
  std::memcpy(b.images.bytes.data(), x.data(), b.images.bytes.size());
  b.labels.dtype = DType::I64;
  b.labels.dims = {n};
  b.labels.bytes.resize(labels.size() * sizeof(int64_t));
  std::memcpy(b.labels.bytes.data(), labels.data(), b.labels.bytes.size());
  return b;
}

// theta = [W (12), pad to 16, b (3), pad to 32] in the flat layout.
constexpr int kWOff = 0, kBOff = 16;

// 16 random 1x2x2 examples (kIn pixels) with labels i % kOut, as training and test set.
Dataset tiny_data(std::mt19937& rng) {
  std::uniform_int_distribution<int> px(0, 255);
  ImageSet set;
  set.count = 16;
  set.rows = set.cols = 2;
  for (int i = 0; i < 16 * kIn; ++i) set.pixels.push_back(static_cast<uint8_t>(px(rng)));
  for (int i = 0; i < 16; ++i) set.labels.push_back(i % kOut);
  Dataset data;
  data.train = data.test = std::make_shared<ImageSet>(std::move(set));
  return data;
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
  for (bool coupled : {false, true}) {
    CAPTURE(coupled);
    CpuSetup o3 = lenet_options({0}, 1, 3), o1 = lenet_options({0}, 1, 1);
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

TEST_CASE("train: a run stopped mid-way and restored into a new trainer continues bit for bit") {
  // Dropout (each learner's RNG position), momentum and AdamW state, SMA's z and z_prev, a
  // learning-rate drop with its reset to z, the data order: all must come back from TrainState.
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
  std::vector<Case> cases(4);
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
  CHECK(checked == 4);
}

TEST_CASE("sma: z after 3 steps equals the SMA update computed by hand, with the default rules") {
  // The defaults for K learners: alpha = min(2 / K, 1/2), gamma = lr x sqrt(K).
  for (const int K : {2, 8}) {
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
    CpuTrainer t(g, {LossKind::MeanSquaredError, ""}, o);
    REQUIRE(t.model().flat_elems() == 32);
    const double alpha = K == 2 ? 0.5 : 0.25;
    CHECK(t.alpha() == alpha);
    CHECK(t.lr_factor() == std::sqrt(static_cast<double>(K)));

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
    const double lr = 0.1, gamma = lr * std::sqrt(static_cast<double>(K)), mu = 0.9, wd = 0.01,
                 muz = 0.5;

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
          const double c = alpha * (th[j][i] - z[i]);
          th[j][i] = th[j][i] - gamma * vel[j][i] - c;
          sum_c[i] += c;
        }
      }
      for (int i = 0; i < n; ++i) {
        const double nz = z[i] + sum_c[i] + muz * (z[i] - zp[i]);
        zp[i] = z[i];
        z[i] = nz;
      }
      if (s == 0) {
        // Step 1: z' = z + sum of c_j with theta_j = z before the step: z does not move.
        CHECK(pack(t.central()) == init);
        CHECK(pack(t.snapshot(1)) == init);  // the pre-step replica
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

  // alpha 0: z never moves, so there is nothing to reset to; one such learner (mu_z 0) stays the
  // single-learner Trainer bit for bit across the drops, momentum kept as PyTorch keeps it.
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
  CpuTrainer two(r.graph, loss, lenet_options({0, 1}, 2, 2));
  CpuTrainer one(r.graph, loss, lenet_options({0, 1}, 1, 4));
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
  double diff = 0, scale = 0;
  for (size_t i = 0; i < za.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(za[i] - zb[i])));
    scale = std::max(scale, static_cast<double>(std::abs(zb[i])));
  }
  MESSAGE("cpu:2 x 2 vs cpu x 4 after 15 steps: max |dz| " << diff << " (max |z| " << scale << ")");
  CHECK(diff <= 1e-5 * scale);  // fp32 summation order only: ~1e-7 relative observed
  CHECK(za != two.replica(0));
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
  for (const Config c : {Config{1, 3, 1}, Config{2, 2, 2}}) {
    CAPTURE(c.devices);
    CAPTURE(c.learners);
    std::vector<std::vector<float>> z, reps;
    std::vector<std::vector<double>> losses;
    std::vector<double> accuracy;
    for (const bool overlap : {false, true}) {
      CpuSetup s = lenet_options({0, 1}, c.devices, c.learners);
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
      std::vector<float> all;
      for (int l = 0; l < t.local_learners(); ++l) {
        std::vector<float> v = t.replica(l), m = t.velocity(l);
        all.insert(all.end(), v.begin(), v.end());
        all.insert(all.end(), m.begin(), m.end());
      }
      reps.push_back(all);
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

  // Over budget: named in bytes.
  CpuSetup tight = lenet_options({0, 1}, 1, 1);
  tight.opts.memory_budget = t.memory().need(2);
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

// ---- divergence
// ----------------------------------------------------------------------------------

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
  bad.images.data<float>()[5] = std::nanf("");
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

// ---- the collective and failures across devices -------------------------------------------------

TEST_CASE("collective: sums in rank order, agrees, and names a rank that never arrives") {
  auto c = make_shared_memory_collectives(3, 0.3);
  auto dev = make_cpu_device(1);
  std::vector<std::vector<float>> data = {
      {1, 2, 3, 4, 5}, {10, 20, 30, 40, 50}, {0.5f, 0, 0, 0, 1}};
  std::vector<std::vector<double>> agreed = {{1, -2}, {3, 7}, {2, 0}};
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r)
    th.emplace_back([&, r] {
      c[r]->allreduce_sum(*dev, kSyncStream, data[r].data(), 5);
      c[r]->agree(agreed[r], ReduceOp::Max);
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < 3; ++r) {
    CHECK(data[r] == std::vector<float>{11.5f, 22, 33, 44, 56});
    CHECK(agreed[r] == std::vector<double>{3, 7});
  }
  // Rank 2 never calls: ranks 0 and 1 stop with an error naming it instead of waiting forever.
  std::vector<std::string> errors(2);
  th.clear();
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      std::vector<double> v = {1};
      errors[r] = error_of([&] { c[r]->agree(v, ReduceOp::Sum); });
    });
  for (auto& t : th) t.join();
  for (const std::string& e : errors) CHECK(contains(e, "rank 2 did not arrive"));
}

TEST_CASE("sma: a failure on one device stops every device before the update (nobody waits)") {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w0(kOut * kIn), b0(kOut), x(2 * kIn);
  for (float& v : w0) v = u(rng);
  for (float& v : b0) v = u(rng);
  for (float& v : x) v = u(rng);
  CpuSetup o;
  o.opts.batch = 2;
  o.opts.learners = 2;
  o.devices = 2;
  o.cores = {0, 0};
  CpuTrainer t(gemm_graph(w0, b0), {LossKind::MeanSquaredError, ""}, o);
  CHECK(t.total_learners() == 4);
  CHECK(t.alpha() == 0.5);
  const Batch good = gemm_batch(x, {0, 1});
  t.step({good, good, good, good}, 0.1);
  const std::vector<float> z = t.central(0), r0 = t.replica(0);
  // A NaN loss on device 1's second learner: device 0 agrees to stop as well.
  Batch bad = good;
  bad.images.data<float>()[3] = std::nanf("");
  std::string e = error_of([&] { t.step({good, good, good, bad}, 0.1); });
  CHECK(contains(e, "diverged at step 2"));
  CHECK(contains(e, "learner 3 (device 1, row 1)"));
  CHECK(t.central(0) == z);
  CHECK(t.central(1) == z);
  CHECK(t.replica(0) == r0);
  // An error (a batch of the wrong shape) on device 0: device 1 does not wait in the sum.
  Batch wrong = gemm_batch(std::vector<float>(3 * kIn, 0.5f), {0, 1, 2});
  e = error_of([&] { t.step({wrong, good, good, good}, 0.1); });
  CAPTURE(e);
  CHECK(contains(e, "takes"));
  CHECK(t.central(1) == z);
  // And the trainer carries on afterwards.
  t.step({good, good, good, good}, 0.1);
  CHECK(t.steps_done() == 2);
  CHECK(t.central(0) == t.central(1));
}

// ---- cb-train
// ------------------------------------------------------------------------------------

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
  auto [rc, text] = run(fmt::format(
      "--learners 2 --devices cpu:2 --threads 2 --steps 40 --eval-every 20 --test-limit 100 "
      "--metrics {} --output {} --sync-every 2 --central-momentum 0.5",
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
  fs::remove_all(dir);
}
