// Tensor data sets end to end: NumPy files (.npz) matched to a model's inputs by name, the target
// array, conversions, the checks that name bad data before training, and cb-train on models that
// are not image classifiers (a regressor, a sequence tagger, a model with its own loss, a Paddle
// export fed NumPy features), each trained model checked by cb-run on held-out data.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "importer/onnx_importer.h"
#include "importer/tensor_io.h"
#include "runtime/data/feed.h"
#include "runtime/data/load_dataset.h"
#include "runtime/data/npy.h"
#include "runtime/data/pipeline.h"
#include "runtime/error.h"
#include "tests/test_util.h"
#include "viz/report.h"

using namespace cb;
namespace fs = std::filesystem;
using test::contains;
using test::error_of;

namespace {

const char* kPython = "/usr/bin/python3";

// Runs Python (Debian's, with NumPy and PyTorch) on `code`; fails the test when it fails.
void python(const std::string& code, const test::TempDir& d) {
  const std::string script = d / "script.py";
  {
    std::ofstream f(script);
    f << "import numpy as np\n" << code << "\n";
  }
  const std::string cmd =
      fmt::format("cd {} && {} {} > {} 2>&1", d.str(), kPython, script, d / "python.log");
  INFO(test::read_text(d / "python.log"));
  REQUIRE(std::system(cmd.c_str()) == 0);
}

bool have_python() {
  return test::need(kPython,
                    "Debian's python3 with numpy and torch (apt-get install python3-torch)");
}

// A model's fixtures from tests/tensor_models.py (model.onnx, train.npz, val.npz) into `dir`.
void make_fixture(const std::string& kind, const std::string& dir) {
  const std::string cmd = fmt::format("{} {}/tests/tensor_models.py {} {} > {}/make.log 2>&1",
                                      kPython, CB_SOURCE_DIR, kind, dir, dir);
  INFO(test::read_text(dir + "/make.log"));
  REQUIRE(std::system(cmd.c_str()) == 0);
}

std::pair<int, std::string> run(const std::string& cmd, const std::string& log) {
  const int rc = std::system(fmt::format("{} > {} 2>&1", cmd, log).c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, test::read_text(log)};
}

// An array of a .npz as a Tensor.
Tensor npz_tensor(const std::string& file, const std::string& name) {
  for (const NpyArray& a : read_npz(file)) {
    if (a.name != name) continue;
    Tensor t;
    t.dtype = a.dtype;
    t.dims = a.shape;
    t.bytes.assign(a.data(), a.data() + a.bytes());
    return t;
  }
  FAIL("no array " << name << " in " << file);
  return {};
}

ModelInput input(const std::string& name, DType t, std::vector<int64_t> dims) {
  ModelInput in;
  in.name = name;
  in.dtype = t;
  in.dims = std::move(dims);
  return in;
}

}  // namespace

TEST_CASE("tensor data: .npz arrays matched to the model's inputs by name, converted, batched") {
  if (!have_python()) return;
  test::TempDir d("npz_data");
  python(R"(
rng = np.random.default_rng(0)
x = rng.normal(size=(10, 2, 3))              # f64, fed to an f32 input [N,6]
tok = rng.integers(0, 9, size=(10, 5)).astype(np.int32)
y = np.arange(10, dtype=np.int64) % 3
np.savez('train.npz', feats=x, tok=tok, label=y)
np.savez_compressed('val.npz', feats=x[:4], tok=tok[:4], label=y[:4])
np.savez('one.npz', x=np.arange(40, dtype=np.float32).reshape(20, 2), y=np.arange(20.0))
)",
         d);
  const Dataset data = load_dataset(d.str());
  REQUIRE(data.tensors());
  CHECK(data.format == DataFormat::Npz);
  CHECK(data.train_size() == 10);
  CHECK(data.test_size() == 4);
  FeedSpec spec;
  spec.inputs = {input("tok", DType::I64, {5}), input("feats", DType::F32, {6})};
  spec.target = input("target", DType::I64, {});
  spec.classes = 3;
  const FeedPlan plan = plan_feed(data, spec, {"label", {}});
  CHECK(plan.tensors);
  CHECK(contains(plan.text, "'feats' f32 [N,6] <- feats"));
  CHECK(contains(plan.text, "target i64 [N] <- label"));
  check_targets(data, true, spec, plan, "training");
  Batch b;
  make_batches(data, true, plan, 0)({7, 2}, 0, b);
  REQUIRE(b.inputs.size() == 2);
  CHECK(b.inputs[0].dtype == DType::I64);
  CHECK(b.inputs[0].dims == std::vector<int64_t>{2, 5});
  CHECK(b.inputs[1].dims == std::vector<int64_t>{2, 6});
  CHECK(b.target.data<int64_t>()[0] == 7 % 3);
  CHECK(b.target.data<int64_t>()[1] == 2);
  const Tensor tok = npz_tensor(d / "train.npz", "tok"), x = npz_tensor(d / "train.npz", "feats");
  for (int k = 0; k < 5; ++k) CHECK(b.inputs[0].data<int64_t>()[k] == tok.data<int32_t>()[35 + k]);
  for (int k = 0; k < 6; ++k)
    CHECK(b.inputs[1].data<float>()[6 + k] == static_cast<float>(x.data<double>()[12 + k]));

  // A pipeline over it: the same batches whatever the workers, the order seeded.
  auto batches = [&](int workers) {
    PipelineOptions po;
    po.batch = 3;
    po.seed = 5;
    po.workers = workers;
    BatchPipeline p(data.train_size(), make_batches(data, true, plan, 5), po);
    std::vector<std::vector<std::byte>> got;
    Batch bb;
    for (int i = 0; i < 7; ++i) {
      REQUIRE(p.next(bb));
      got.push_back(bb.inputs[1].bytes);
      got.push_back(bb.target.bytes);
    }
    return got;
  };
  CHECK(batches(1) == batches(3));

  // One file, --val-split: a fixed choice of held-out rows, disjoint from the training rows.
  DataOptions o;
  o.val_split = 0.25;
  const Dataset one = load_dataset(d / "one.npz", o);
  CHECK(one.train_size() == 15);
  CHECK(one.test_size() == 5);
  FeedSpec s1;
  s1.inputs = {input("input", DType::F32, {2})};  // a one-input model takes the array x
  s1.target = input("target", DType::F32, {});
  const FeedPlan p1 = plan_feed(one, s1, {});
  std::vector<float> seen;
  for (const auto& set : {one.train, one.test}) {
    Batch bb;
    std::vector<int64_t> all(static_cast<size_t>(set->size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    make_batches(set, p1, false, 0, one.skipped)(all, 0, bb);
    for (int64_t i = 0; i < set->size(); ++i) {
      CHECK(bb.inputs[0].data<float>()[2 * i] == 2 * bb.target.data<float>()[i]);
      seen.push_back(bb.target.data<float>()[i]);
    }
  }
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == static_cast<float>(i));
  CHECK(load_dataset(d / "one.npz", o).test->describe() == one.test->describe());
}

TEST_CASE("tensor data: bad data is named before training") {
  if (!have_python()) return;
  test::TempDir d("npz_bad");
  python(R"(
x = np.zeros((8, 4), np.float32)
np.savez('ok.npz', x=x, y=np.zeros((8, 1), np.float32))
np.savez('noy.npz', x=x)
np.savez('wide.npz', x=np.zeros((8, 5), np.float32), y=np.zeros((8, 1), np.float32))
np.savez('rows.npz', x=x, y=np.zeros((7, 1), np.float32))
y = np.zeros((8, 1), np.float32); y[5, 0] = np.nan
np.savez('nan.npz', x=x, y=y)
np.savez('cls.npz', x=x, y=np.array([0, 1, 2, 3, 1, 0, 2, -100]))
np.savez('fcls.npz', x=x, y=np.zeros(8, np.float32))
np.savez('ftok.npz', x=x.astype(np.float64), y=np.zeros(8, np.int64))
)",
         d);
  {
    std::ofstream f(d / "cut.npz", std::ios::binary);
    const std::string whole = test::read_text(d / "ok.npz");
    f << whole.substr(0, whole.size() / 2);
  }
  DataOptions o;
  o.val_split = 0.25;
  FeedSpec reg;
  reg.inputs = {input("features", DType::F32, {4})};
  reg.target = input("target", DType::F32, {1});
  FeedSpec cls = reg;
  cls.target = input("target", DType::I64, {});
  cls.classes = 3;
  cls.ignore_index = -100;
  auto plan_of = [&](const std::string& file, const FeedSpec& spec) {
    const Dataset data = load_dataset(d / file, o);
    const FeedPlan p = plan_feed(data, spec, {});
    check_targets(data, true, spec, p, "training");
    check_targets(data, false, spec, p, "test");
  };
  CHECK_NOTHROW(plan_of("ok.npz", reg));
  std::string e = error_of([&] { plan_of("noy.npz", reg); });
  CHECK(contains(e, "no array 'y' for the target"));
  CHECK(contains(e, "--target NAME"));
  CHECK(contains(e, "noy.npz"));
  e = error_of([&] { plan_of("wide.npz", reg); });
  CHECK(contains(e, "array 'x' is f32 [N,5] but model input 'features' takes f32 [N,4]"));
  CHECK(contains(e, "axis 1: 5 in the data, 4 in the model"));
  e = error_of([&] { plan_of("rows.npz", reg); });
  CHECK(contains(e, "array 'x' has 8 rows but 'y' has 7"));
  e = error_of([&] { plan_of("nan.npz", reg); });
  CHECK(contains(e, "target 'y' of example"));
  CHECK(contains(e, "is nan"));
  e = error_of([&] { plan_of("cls.npz", cls); });
  CHECK(contains(e, "is class 3, outside the model's 3 classes"));
  e = error_of([&] { plan_of("fcls.npz", cls); });
  CHECK(contains(e, "the target array 'y' is f32, but the loss takes class indices"));
  FeedSpec tok = cls;
  tok.inputs = {input("x", DType::I64, {4})};
  e = error_of([&] { plan_of("ftok.npz", tok); });
  CHECK(contains(e, "array 'x' is f64 but model input 'x' takes i64"));
  e = error_of([&] { load_dataset(d / "cut.npz", o); });
  CHECK(contains(e, "cut.npz"));
  fs::create_directories(d / "notest");
  fs::copy_file(d / "ok.npz", d / "notest/train.npz");
  e = error_of([&] { load_dataset(d / "notest", o); });
  CHECK(contains(e, "no val.npz or test.npz"));
  o.val_split = 0;
  e = error_of([&] { load_dataset(d / "ok.npz", o); });
  CHECK(contains(e, "--val-split 0"));
}

namespace {

// R² of `pred` against `y` (same number of values).
double r2_of(const Tensor& pred, const Tensor& y) {
  REQUIRE(pred.numel() == y.numel());
  double mean = 0;
  for (int64_t i = 0; i < y.numel(); ++i) mean += y.real_at(i);
  mean /= static_cast<double>(y.numel());
  double sse = 0, sst = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    sse += (pred.real_at(i) - y.real_at(i)) * (pred.real_at(i) - y.real_at(i));
    sst += (y.real_at(i) - mean) * (y.real_at(i) - mean);
  }
  return 1 - sse / sst;
}

// The trained model at `model` run by cb-run on the arrays `inputs` of `npz` (input name = array
// name); its output `output`.
Tensor cb_run(const std::string& model, const std::string& npz,
              const std::vector<std::pair<std::string, std::string>>& inputs,
              const std::string& output, const test::TempDir& d) {
  std::string args;
  for (const auto& [in, array] : inputs) {
    const std::string pb = d / (in + ".pb");
    write_tensor_file(pb, npz_tensor(npz, array), in);
    args += fmt::format(" --input {}={}", in, pb);
  }
  const auto [rc, text] =
      run(fmt::format("{}/cb-run {}{} --output-dir {}", CB_BINARY_DIR, model, args, d / "run"),
          d / "run.log");
  INFO(text);
  REQUIRE(rc == 0);
  return *read_tensor_file(d / ("run/" + output + ".pb"));
}

std::pair<int, std::string> cb_train(const std::string& args, const test::TempDir& d) {
  return run(fmt::format("{}/cb-train {}", CB_BINARY_DIR, args), d / "train.log");
}

}  // namespace

TEST_CASE("cb-train on NumPy data: an MLP regressor reaches R² >= 0.95 (checked by cb-run)") {
  if (!have_python()) return;
  test::TempDir d("npz_regressor");
  make_fixture("regressor", d.str());
  const auto [rc, text] =
      cb_train(fmt::format("{} --data {} --loss mse --optimizer adamw --lr 0.003 --epochs 12 "
                           "--batch-size 16 --threads 2 --output {} --metrics {}",
                           d / "model.onnx", d.str(), d / "trained.onnx", d / "m.jsonl"),
               d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "'x' f32 [N,4] <- x, target f32 [N,1] <- y"));
  CHECK(contains(text, "examples/s"));
  const auto recs = viz::read_metrics(d / "m.jsonl");
  REQUIRE(!recs.empty());
  const auto& sum = recs.back();
  REQUIRE(sum.contains("test_r2"));
  CHECK(sum["test_r2"].get<double>() >= 0.95);
  CHECK(sum.contains("test_mae"));
  const Tensor pred = cb_run(d / "trained.onnx", d / "val.npz", {{"x", "x"}}, "y_hat", d);
  const double r2 = r2_of(pred, npz_tensor(d / "val.npz", "y"));
  MESSAGE("regressor: held-out R² " << r2 << " by cb-run, " << sum["test_r2"] << " by cb-train");
  CHECK(r2 >= 0.95);
  CHECK(std::abs(r2 - sum["test_r2"].get<double>()) < 1e-3);
}

TEST_CASE("cb-train on NumPy data: a GRU tagger over int64 tokens learns a shifted copy") {
  if (!have_python()) return;
  test::TempDir d("npz_tagger");
  make_fixture("tagger", d.str());
  const auto [rc, text] = cb_train(
      fmt::format("{} --data {} --ignore-index -100 --optimizer adamw --lr 0.01 --epochs 2 "
                  "--batch-size 16 --threads 2 --output {} --metrics {}",
                  d / "model.onnx", d.str(), d / "trained.onnx", d / "m.jsonl"),
      d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "'tokens' i64 [N,12] <- tokens, target i64 [N,12] <- y"));
  CHECK(contains(text, "classes on axis 2 (auto: the target array 'y' is i64: class indices)"));
  const auto recs = viz::read_metrics(d / "m.jsonl");
  const double acc = recs.back()["test_accuracy"].get<double>();
  MESSAGE("tagger: token accuracy " << acc);
  CHECK(acc >= 0.95);
  // cb-run on the held-out tokens: the exported model's argmax over the vocabulary.
  const Tensor logits =
      cb_run(d / "trained.onnx", d / "val.npz", {{"tokens", "tokens"}}, "logits", d);
  const Tensor y = npz_tensor(d / "val.npz", "y");
  REQUIRE(logits.dims.size() == 3);
  const int64_t v = logits.dims[2];
  int64_t counted = 0, correct = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const int64_t t = y.data<int64_t>()[i];
    if (t == -100) continue;
    int64_t arg = 0;
    for (int64_t c = 1; c < v; ++c)
      if (logits.real_at(i * v + c) > logits.real_at(i * v + arg)) arg = c;
    ++counted;
    correct += arg == t;
  }
  const double run_acc = static_cast<double>(correct) / static_cast<double>(counted);
  CHECK(run_acc >= 0.95);
  CHECK(std::abs(run_acc - acc) < 1e-9);
}

TEST_CASE("cb-train on NumPy data: a model exported with its own loss trains on output:loss") {
  if (!have_python()) return;
  test::TempDir d("npz_ownloss");
  make_fixture("ownloss", d.str());
  const auto [rc, text] = cb_train(
      fmt::format("{} --data {} --loss output:loss --optimizer adamw --lr 0.003 --epochs 12 "
                  "--batch-size 16 --threads 2 --output {} --metrics {}",
                  d / "model.onnx", d.str(), d / "trained.onnx", d / "m.jsonl"),
      d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "'x' f32 [N,4] <- x, 'y' f32 [N,1] <- y"));
  const auto recs = viz::read_metrics(d / "m.jsonl");
  const double first = recs[1]["test_loss"].get<double>(), last = recs.back()["test_loss"];
  MESSAGE("own loss: test loss " << first << " -> " << last);
  // The exported model keeps the graph as given: both inputs, both outputs.
  const ImportResult back = import_model(d / "trained.onnx");
  CHECK(back.graph.inputs.size() == 2);
  CHECK(back.graph.outputs.size() == 2);
  const Tensor pred =
      cb_run(d / "trained.onnx", d / "val.npz", {{"x", "x"}, {"y", "y"}}, "pred", d);
  const double r2 = r2_of(pred, npz_tensor(d / "val.npz", "y"));
  MESSAGE("own loss: held-out R² " << r2);
  CHECK(r2 >= 0.95);
}

TEST_CASE("cb-train on NumPy data: PaddleOCR's classifier (a Paddle export) on f16 features") {
  if (!have_python()) return;
  const std::string model = CB_SOURCE_DIR "/tests/third_party/ppocr_cls/model.onnx";
  if (!test::need(model, "PaddleOCR's direction classifier (tests/third_party/MODELS.md)")) return;
  test::TempDir d("npz_paddle");
  make_fixture("features", d.str());
  const auto [rc, text] = cb_train(
      // 4 epochs: the pretrained BatchNorm statistics take about 3 to follow these features.
      // Under a sanitizer, 20 steps: the same reading and training path; the accuracy is the
      // Release build's (those 4 epochs took 98 s of the ASan stage).
      fmt::format("{} --data {} --lr 0.01 {} --batch-size 16 --threads 2 --output {} "
                  "--metrics {}",
                  model, d.str(), test::kSanitized ? "--steps 20" : "--epochs 4",
                  d / "trained.onnx", d / "m.jsonl"),
      d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "f32 [N,3,48,192] <- x, target i64 [N] <- y"));
  CHECK(fs::exists(d / "trained.onnx"));
  if (test::kSanitized) return;
  const double acc = viz::read_metrics(d / "m.jsonl").back()["test_accuracy"].get<double>();
  MESSAGE("paddle on features: accuracy " << acc);
  CHECK(acc >= 0.95);
}

TEST_CASE("cb-train on NumPy data: 2 learners, a checkpoint, --resume: the same bytes") {
  if (!have_python()) return;
  test::TempDir d("npz_resume");
  make_fixture("regressor", d.str());
  const std::string common = fmt::format(
      "{} --data {} --loss mse --lr 0.01 --learners 2 --batch-size 16 --threads 2 --steps 60 "
      "--eval-every 30",
      d / "model.onnx", d.str());
  auto [rc, text] = cb_train(fmt::format("{} --checkpoint-dir {} --checkpoint-every 30 --output {}",
                                         common, d / "ck", d / "whole.onnx"),
                             d);
  INFO(text);
  REQUIRE(rc == 0);
  std::string first;  // the checkpoint at step 30
  for (const auto& e : fs::directory_iterator(d / "ck"))
    if (e.path().filename().string().starts_with("ckpt-") &&
        (first.empty() || e.path().string() < first))
      first = e.path().string();
  REQUIRE(contains(first, "30"));
  std::tie(rc, text) =
      cb_train(fmt::format("{} --resume {} --output {}", common, first, d / "resumed.onnx"), d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "resume   " + first + ": step 30"));
  CHECK(test::read_text(d / "resumed.onnx") == test::read_text(d / "whole.onnx"));

  // Resumed at its end (the checkpoint of step 60: a run killed after its last checkpoint), it
  // trains nothing and still writes --output (it used to print "wrote" and write nothing).
  std::tie(rc, text) =
      cb_train(fmt::format("{} --resume {} --output {}", common, d / "ck", d / "at_end.onnx"), d);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(contains(text, "ckpt-0000000060: step 60"));
  REQUIRE(fs::exists(d / "at_end.onnx"));
  CHECK(test::read_text(d / "at_end.onnx") == test::read_text(d / "whole.onnx"));
}

TEST_CASE("cb-train on NumPy data: bad data stops before the first step, named") {
  if (!have_python()) return;
  test::TempDir d("npz_cli_bad");
  make_fixture("regressor", d.str());
  python(R"(
d = dict(np.load('train.npz'))
d['y'][17, 0] = np.inf
np.savez('nan/train.npz', **d)
np.savez('nan/val.npz', **dict(np.load('val.npz')))
np.savez('noy/train.npz', x=d['x'])
np.savez('noy/val.npz', x=d['x'][:10])
)",
         [&]() -> const test::TempDir& {
           fs::create_directories(d / "nan");
           fs::create_directories(d / "noy");
           return d;
         }());
  auto [rc, text] = cb_train(fmt::format("{} --data {} --steps 5", d / "model.onnx", d / "nan"), d);
  CHECK(rc == 1);
  CHECK(contains(text, "target 'y' of example 17 (element 0) is inf"));
  CHECK(!contains(text, "epoch "));
  std::tie(rc, text) =
      cb_train(fmt::format("{} --data {} --steps 5", d / "model.onnx", d / "noy"), d);
  CHECK(rc == 1);
  CHECK(contains(text, "no array 'y' for the target"));
  std::tie(rc, text) =
      cb_train(fmt::format("{} --data {} --steps 5 --target z", d / "model.onnx", d.str()), d);
  CHECK(rc == 1);
  CHECK(contains(text, "no array 'z' for the target"));
}
