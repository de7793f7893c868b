// The public C++ API (include/crossbow/crossbow.h), from a program that sees nothing else of
// crossbow: this binary links libcrossbow.so alone. Options by name with cb-train's messages,
// training from arrays and from caller-made batches (the same weights as arrays in file order),
// evaluation, prediction, export, checkpoints, callbacks that stop, and errors naming what is
// wrong.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <crossbow/crossbow.h>
#include <doctest/doctest.h>
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using crossbow::Array;
using crossbow::Arrays;
using crossbow::Data;
using crossbow::DType;
using crossbow::Error;

namespace {

const std::string kSrc = CB_SOURCE_DIR;
const std::string kFmnist = "/usr/share/datasets/fashion-mnist";

bool need(const std::string& path) {
  if (fs::exists(path)) return true;
  if (std::getenv("CI")) FAIL("missing test input " << path);
  MESSAGE("skipped: " << path << " is missing");
  return false;
}

std::string error_of(const std::function<void()>& f, Error::Kind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The first n examples of a gzipped IDX pair as float32 [n,1,28,28] in [0,1] and int64 [n].
std::pair<Array, Array> fmnist(const std::string& split, int64_t n) {
  auto read = [](const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    std::vector<unsigned char> out;
    unsigned char buf[1 << 16];
    int got = 0;
    while ((got = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + got);
    gzclose(f);
    return out;
  };
  const auto img = read(kFmnist + "/" + split + "-images-idx3-ubyte.gz");
  const auto lab = read(kFmnist + "/" + split + "-labels-idx1-ubyte.gz");
  std::vector<float> x(static_cast<size_t>(n) * 784);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(img[16 + i]) / 255.0f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = lab[8 + i];
  return {Array::copy_of(x, {n, 1, 28, 28}), Array::copy_of(y, {n})};
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("cb_api_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

crossbow::Options small_run() {
  crossbow::Options o;
  o.set("learners", "2").set("threads", "1").set("batch-size", "16").set("lr", "0.05");
  return o;
}

}  // namespace

TEST_CASE("api: options by name, with cb-train's defaults and messages") {
  crossbow::Options o;
  CHECK(o.get("batch-size") == "16");
  CHECK(o.get("batch_size") == "16");
  CHECK(o.get("--lr") == "0.01");
  CHECK(o.get("learners") == "auto");
  o.set("batch_size", "32").set("learners", "3").set("mean", "0.5,0.25").set("nesterov", "true");
  CHECK(o.get("batch-size") == "32");
  CHECK(o.get("learners") == "3");
  CHECK(o.get("mean") == "0.5,0.25");
  CHECK(o.get("nesterov") == "true");
  Error::Kind kind{};
  CHECK(contains(error_of([&] { o.set("batch-sise", "8"); }, &kind),
                 "unknown option 'batch-sise' (did you mean 'batch-size'?)"));
  CHECK(kind == Error::Kind::Usage);
  CHECK(contains(error_of([&] { o.set("epochs", "two"); }), "--epochs 'two': expected an integer"));
  CHECK(contains(error_of([&] { o.set("learners", "0"); }), "--learners must be at least 1"));
  CHECK(contains(error_of([&] { o.set("nesterov", "maybe"); }), "expected true or false"));
  // Checked as a whole when the trainer is made (a usage error, before anything is read).
  crossbow::Options bad;
  bad.set("label-smoothing", "1.5");
  CHECK(contains(error_of([&] { crossbow::Trainer(kSrc + "/models/mlp_op17.onnx", bad); }, &kind),
                 "--label-smoothing must be in [0, 1)"));
  CHECK(kind == Error::Kind::Usage);
  bool found = false;
  for (const auto& i : crossbow::Options::list())
    if (i.name == "batch-size") found = i.alias == "b" && i.default_value == "16";
  CHECK(found);
}

TEST_CASE("api: arrays and caller-made batches train the same weights; evaluate, predict, save") {
  if (!need(kFmnist)) return;
  TempDir dir("fit");
  const auto [x, y] = fmnist("train", 640);
  const auto [xv, yv] = fmnist("t10k", 200);
  auto options = small_run();
  options.set("no-shuffle", "true").set("steps", "10");
  const std::string model = kSrc + "/models/mlp_op17.onnx";

  crossbow::Trainer a(model, options);
  const crossbow::History h =
      a.fit(Data::arrays({{"x", x}, {"y", y}}), Data::arrays({{"x", xv}, {"y", yv}}));
  CHECK(a.steps() == 10);
  CHECK(a.learners() == 2);
  REQUIRE(h.records.size() >= 3);
  CHECK(h.records.front().type == "config");
  CHECK(h.records.back().type == "summary");
  CHECK(h.records.back().numbers.at("test_accuracy") > 0.3);
  a.save((dir.path / "a.onnx").string());

  // The same batches from the caller: 16 rows at a time in file order, through the prefetcher.
  crossbow::Trainer b(model, options);
  int passes = 0;
  auto start = [&, x = x, y = y]() -> Data::Next {
    ++passes;
    auto at = std::make_shared<int64_t>(0);
    return [at, x, y](Arrays& batch) {
      if (*at + 16 > x.shape[0]) return false;
      const float* px = x.as<float>() + *at * 784;
      const int64_t* py = y.as<int64_t>() + *at;
      batch = {{"x", Array::view(DType::F32, {16, 1, 28, 28}, px, x.keep)},
               {"y", Array::view(DType::I64, {16}, py, y.keep)}};
      *at += 16;
      return true;
    };
  };
  b.fit(Data::batches(start, 40), Data::arrays({{"x", xv}, {"y", yv}}));
  CHECK(passes == 1);
  b.save((dir.path / "b.onnx").string());
  CHECK(bytes_of((dir.path / "a.onnx").string()) == bytes_of((dir.path / "b.onnx").string()));

  // Evaluation and prediction agree: the argmax of the predicted scores is the accuracy.
  const crossbow::Scores s = a.evaluate(Data::arrays({{"x", xv}, {"y", yv}}));
  CHECK(s.at("count") == 200);
  const Arrays out = a.predict(Data::arrays({{"x", xv}}));
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].second.shape == std::vector<int64_t>{200, 10});
  int right = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const float* r = out[0].second.as<float>() + i * 10;
    right += std::max_element(r, r + 10) - r == yv.as<int64_t>()[i];
  }
  CHECK(std::abs(right / 200.0 - s.at("accuracy")) < 1e-9);

  // A later fit trains on (a new schedule), and a run option may change between fits.
  a.set("steps", "5");
  a.fit(Data::arrays({{"x", x}, {"y", y}}));
  CHECK(a.steps() == 15);
  CHECK(contains(error_of([&] { a.set("batch-size", "8"); }), "--batch-size cannot change"));
}

TEST_CASE("api: a pass source used up, a callback's stop, checkpoints and resume") {
  if (!need(kFmnist)) return;
  TempDir dir("stop");
  const auto [x, y] = fmnist("train", 320);
  const std::string model = kSrc + "/models/mlp_op17.onnx";
  auto options = small_run();
  options.set("epochs", "2");
  // A one-shot source (a second pass yields nothing) cannot give a second epoch: named.
  bool used = false;
  auto once = [&, x = x, y = y]() -> Data::Next {
    const bool first = !used;
    used = true;
    auto done = std::make_shared<int>(first ? 0 : 20);
    return [done, x, y](Arrays& batch) {
      if (*done == 20) return false;
      const int64_t at = (*done)++ * 16;
      batch = {{"x", Array::view(DType::F32, {16, 1, 28, 28}, x.as<float>() + at * 784, x.keep)},
               {"y", Array::view(DType::I64, {16}, y.as<int64_t>() + at, y.keep)}};
      return true;
    };
  };
  crossbow::Trainer t(model, options);
  CHECK(contains(error_of([&] { t.fit(Data::batches(once)); }), "pass 2 yielded none"));

  // on_eval stops after the first evaluation (evaluations every 5 steps); the trainer stays usable.
  options.set("eval-every", "5").set("checkpoint-dir", (dir.path / "ck").string());
  crossbow::Trainer s(model, options);
  crossbow::FitCallbacks cbs;
  int evals = 0;
  cbs.on_eval = [&](const crossbow::Record& r) {
    ++evals;
    CHECK(r.type == "eval");
    return true;
  };
  const crossbow::History h =
      s.fit(Data::arrays({{"x", x}, {"y", y}}), Data::arrays({{"x", x}, {"y", y}}), cbs);
  CHECK(h.stopped);
  CHECK(h.signal == 0);
  CHECK(evals == 1);
  CHECK(s.steps() == 5);
  CHECK(fs::exists(dir.path / "ck" / "ckpt-0000000005"));
  // should_stop after 3 steps of the next fit.
  crossbow::FitCallbacks after3;
  int polled = 0;
  after3.should_stop = [&] { return ++polled == 3; };
  s.set("eval-every", "0");
  CHECK(s.fit(Data::arrays({{"x", x}, {"y", y}}), {}, after3).stopped);
  CHECK(s.steps() == 8);
  // Each fit has a schedule and data position of its own, but numbers its steps on from the
  // earlier fits': its checkpoints are named by the session's steps, never mixed with theirs.
  const std::string ck = s.save_checkpoint();
  CHECK(contains(ck, "ckpt-0000000008"));
  CHECK(!fs::exists(dir.path / "ck" / "ckpt-0000000003"));
  // Resume of the first fit's checkpoint continues that run to its end: 2 epochs of 10 steps
  // (2 learners x 16 of 320).
  crossbow::Options more = options;
  more.set("resume", (dir.path / "ck" / "ckpt-0000000005").string()).set("eval-every", "0");
  fs::remove_all(dir.path / "ck2");
  more.set("checkpoint-dir", (dir.path / "ck2").string());
  crossbow::Trainer r(model, more);
  r.fit(Data::arrays({{"x", x}, {"y", y}}), Data::arrays({{"x", x}, {"y", y}}));  // the same data
  CHECK(r.steps() == 20);
}

TEST_CASE("api: a later fit numbers its steps on from the earlier fits'") {
  if (!need(kFmnist)) return;
  TempDir dir("numbering");
  const auto [x, y] = fmnist("train", 160);
  auto options = small_run();
  options.set("steps", "4").set("eval-every", "2").set("test-limit", "32");
  options.set("checkpoint-dir", (dir.path / "ck").string()).set("checkpoint-every", "2");
  options.set("keep", "10");
  crossbow::Trainer t(kSrc + "/models/mlp_op17.onnx", options);
  // The steps of each fit's evaluations, as its records give them.
  auto eval_steps = [](const crossbow::History& h) {
    std::vector<double> steps;
    for (const crossbow::Record& r : h.records)
      if (r.type == "eval") steps.push_back(r.numbers.at("step"));
    return steps;
  };
  const Data train = Data::arrays({{"x", x}, {"y", y}});
  CHECK(eval_steps(t.fit(train, train)) == std::vector<double>{2, 4});
  CHECK(eval_steps(t.fit(train, train)) == std::vector<double>{6, 8});
  CHECK(t.steps() == 8);
  // One folder, the checkpoints of both fits in one sequence of steps.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path / "ck"))
    if (e.is_directory()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"ckpt-0000000002", "ckpt-0000000004", "ckpt-0000000006",
                                          "ckpt-0000000008"});
  CHECK(contains(t.save_checkpoint(), "ckpt-0000000008"));
}

TEST_CASE("api: bad data is named, and nothing is lost") {
  if (!need(kFmnist)) return;
  const auto [x, y] = fmnist("train", 64);
  const std::string model = kSrc + "/models/mlp_op17.onnx";
  crossbow::Trainer t(model, small_run());
  Error::Kind kind{};
  // Rows that differ between the arrays.
  std::vector<int64_t> few(10, 1);
  CHECK(contains(error_of(
                     [&] {
                       t.fit(Data::arrays({{"x", x}, {"y", Array::copy_of(few, {10})}}));
                     },
                     &kind),
                 "rows"));
  CHECK(kind == Error::Kind::Input);
  // A shape that does not fit the model's input: the array and both sizes named.
  std::vector<float> wrong(64 * 100, 0.5f);
  const std::string e = error_of([&] {
    t.fit(Data::arrays({{"x", Array::copy_of(wrong, {64, 100})}, {"y", y}}));
  });
  CHECK(contains(e, "'x'"));
  CHECK(contains(e, "100"));
  // A label outside the classes: the example named.
  std::vector<int64_t> labels(64, 3);
  labels[7] = 12;
  CHECK(contains(error_of([&] {
                   t.fit(Data::arrays({{"x", x}, {"y", Array::copy_of(labels, {64})}}));
                 }),
                 "12"));
  // No target array: the arrays that are there are listed.
  CHECK(contains(error_of([&] { t.fit(Data::arrays({{"x", x}, {"labels", y}})); }), "labels"));
  // A training batch of the wrong size from the caller.
  auto big = [x = x, y = y]() -> Data::Next {
    return [x, y](Arrays& batch) {
      batch = {{"x", x}, {"y", y}};
      return true;
    };
  };
  CHECK(contains(error_of([&] { t.fit(Data::batches(big)); }),
                 "a training batch of 64 examples: expected batch-size 16"));
  // After all that the trainer still trains.
  crossbow::Trainer ok(model, small_run().set("steps", "2"));
  ok.fit(Data::arrays({{"x", x}, {"y", y}}));
  CHECK(ok.steps() == 2);
  // A missing data path.
  CHECK(contains(error_of([&] { ok.fit(Data::path("/nonexistent/data")); }), "/nonexistent/data"));
}
