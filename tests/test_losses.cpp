// The trainer's losses (autodiff's append_loss) against PyTorch 1.13 (Debian's, at
// /usr/bin/python3): for each loss, its value and its gradient with respect to the model output
// on seeded random f64 data (cross-entropy over [N,C], [N,T,C] and [N,C,H,W] with ignored
// labels and label smoothing; MSE, L1 and Huber with exact zeros and a delta; BCE with logits at
// 0 and far out), then central finite differences of the evaluation graph (build_eval_graph)
// against the training graph's gradient, and the errors --loss and its settings give.
// The model is y = x + P (P a zero parameter), so dloss/dP = dloss/dy.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/data/dataset.h"
#include "runtime/data/load_dataset.h"
#include "runtime/error.h"
#include "runtime/executor.h"
#include "runtime/graph_builder.h"
#include "sma/checkpoint.h"
#include "sma/train_loop.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"
#include "tests/trainer_util.h"

using namespace cb;

namespace {

Tensor f64(std::vector<int64_t> dims, std::vector<double> v) {
  return testing::tensor_of(DType::F64, std::move(dims), v);
}

// y = x + P over static dims `dims`: the output "y", input "x", a zero parameter "P".
Graph model(const std::vector<int64_t>& dims) {
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "m");
  ValueId x = b.input("x", DType::F64, shape_of(dims));
  Value p;
  p.name = "P";
  p.kind = ValueKind::Parameter;
  p.initializer = true;
  p.dtype = DType::F64;
  p.shape = shape_of(dims);
  p.shape_known = true;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  p.data = std::make_shared<Tensor>(f64(dims, std::vector<double>(static_cast<size_t>(n), 0.0)));
  ValueId pid = g.add_value(std::move(p));
  ValueId y = b.op("Add", {x, pid});
  g.value(y).name = "y";
  g.outputs = {y};
  return g;
}

struct LossCase {
  std::string name;
  LossSpec spec;
  Tensor y, target;
  std::string torch;  // the loss in PyTorch, of y and t (F = torch.nn.functional)
  bool finite_differences = true;
};

// The loss and dloss/dy from the training graph.
std::pair<double, std::vector<double>> ours(const LossCase& c, Device& dev) {
  Graph g = model(c.y.dims);
  TrainingGraph t = build_training_graph(g, c.spec);
  REQUIRE(t.params.size() == 1);
  Executor ex(t.graph, dev, c.y.dims[0]);
  ex.set_input(0, c.y);
  ex.set_input(1, c.target);
  ex.run();
  const Tensor loss = ex.output(0), grad = ex.output(2);
  std::vector<double> dy(static_cast<size_t>(grad.numel()));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = grad.real_at(static_cast<int64_t>(i));
  return {loss.real_at(0), dy};
}

// The evaluation graph's loss (its last output) at output y.
double eval_loss(const Graph& eval, const LossCase& c, const Tensor& y, Device& dev) {
  Executor ex(eval, dev, c.y.dims[0]);
  ex.set_input(0, y);
  ex.set_input(eval.inputs.size() - 1, c.target);
  ex.run();
  const Tensor l = ex.output(eval.outputs.size() - 1);
  REQUIRE(l.dtype == DType::F32);
  REQUIRE(l.dims.empty());
  return l.real_at(0);
}

std::string py_list(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.numel(); ++i)
    s += fmt::format("{}{}", i ? "," : "",
                     t.dtype == DType::I64 ? fmt::format("{}", t.int_at(i))
                                           : fmt::format("{:.17g}", t.real_at(i)));
  return s + "]";
}
std::string py_dims(const std::vector<int64_t>& d) {
  std::string s = "(";
  for (int64_t v : d) s += fmt::format("{},", v);
  return s + ")";
}

// Every case's PyTorch loss and gradient, one line each ("loss g0 g1 ..."), from one run of
// /usr/bin/python3; empty when torch is not there.
std::vector<std::vector<double>> torch_results(const std::vector<LossCase>& cases) {
  if (std::system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    const char* ci = std::getenv("CI");  // as test::need: CI fails on a missing input
    if (ci && *ci) FAIL_CHECK("/usr/bin/python3 has no torch (apt-get install python3-torch)");
    return {};
  }
  test::TempDir d("losses");
  std::string py =
      "import torch\nimport torch.nn.functional as F\ntorch.set_num_threads(1)\n"
      "def run(y, t, f):\n"
      "    y = y.clone().requires_grad_()\n"
      "    loss = f(y, t)\n"
      "    loss.backward()\n"
      "    print(repr(loss.item()), ' '.join(repr(v) for v in y.grad.flatten().tolist()))\n";
  for (const LossCase& c : cases)
    py += fmt::format(
        "run(torch.tensor({}, dtype=torch.float64).reshape({}), torch.tensor({}, "
        "dtype=torch.{}).reshape({}), lambda y, t: {})\n",
        py_list(c.y), py_dims(c.y.dims), py_list(c.target),
        c.target.dtype == DType::I64 ? "int64" : "float64", py_dims(c.target.dims), c.torch);
  {
    std::ofstream f(d / "losses.py");
    f << py;
  }
  const std::string cmd = fmt::format("/usr/bin/python3 {} > {}", d / "losses.py", d / "out.txt");
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(d / "out.txt");
  std::vector<std::vector<double>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    out.emplace_back();
    for (double v; ls >> v;) out.back().push_back(v);
  }
  REQUIRE(out.size() == cases.size());
  return out;
}

std::mt19937_64 rng(2024);
Tensor uniform(std::vector<int64_t> dims, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = 1;
  for (int64_t v : dims) n *= v;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return f64(std::move(dims), v);
}
// Labels in [0, c), about one in `ignore_every` set to `ignore` (0: none).
Tensor labels(std::vector<int64_t> dims, int64_t c, int ignore_every = 0, int64_t ignore = -100) {
  std::uniform_int_distribution<int64_t> u(0, c - 1);
  int64_t n = 1;
  for (int64_t v : dims) n *= v;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = ignore_every > 0 && i % static_cast<size_t>(ignore_every) == 1 ? ignore : u(rng);
  return testing::i64_tensor(std::move(dims), v);
}

LossSpec spec(LossKind k, double smoothing = 0, double delta = 1.0) {
  LossSpec s;
  s.kind = k;
  s.output = "y";
  s.label_smoothing = smoothing;
  s.huber_delta = delta;
  return s;
}

std::vector<LossCase> cases() {
  std::vector<LossCase> cs;
  using K = LossKind;
  cs.push_back({"CE [N,C], ignored labels", spec(K::SoftmaxCrossEntropy), uniform({8, 5}, -3, 3),
                labels({8}, 5, 3), "F.cross_entropy(y, t)"});
  cs.push_back({"CE [N,T,C] (class axis 2), ignored labels", spec(K::SoftmaxCrossEntropy),
                uniform({3, 4, 6}, -3, 3), labels({3, 4}, 6, 4),
                "F.cross_entropy(y.permute(0, 2, 1), t)"});
  cs.push_back({"CE [N,C,H,W], ignored labels", spec(K::SoftmaxCrossEntropy),
                uniform({2, 5, 3, 4}, -3, 3), labels({2, 3, 4}, 5, 5), "F.cross_entropy(y, t)"});
  cs.push_back({"CE [N,C], label smoothing 0.1, ignored labels", spec(K::SoftmaxCrossEntropy, 0.1),
                uniform({7, 4}, -3, 3), labels({7}, 4, 3),
                "F.cross_entropy(y, t, label_smoothing=0.1)"});
  cs.push_back({"CE [N,T,C], label smoothing 0.1, ignored labels",
                spec(K::SoftmaxCrossEntropy, 0.1), uniform({2, 5, 7}, -3, 3), labels({2, 5}, 7, 3),
                "F.cross_entropy(y.permute(0, 2, 1), t, label_smoothing=0.1)"});
  cs.push_back({"CE [N,C,H,W], label smoothing 0.2", spec(K::SoftmaxCrossEntropy, 0.2),
                uniform({2, 3, 2, 3}, -3, 3), labels({2, 2, 3}, 3),
                "F.cross_entropy(y, t, label_smoothing=0.2)"});
  {
    LossCase c{"CE [N,C,T] with --class-axis 1, ignore_index 2", spec(K::SoftmaxCrossEntropy),
               uniform({3, 4, 5}, -3, 3), labels({3, 5}, 4, 4, 2),
               "F.cross_entropy(y, t, ignore_index=2)"};
    c.spec.class_axis = 1;
    c.spec.ignore_index = 2;
    cs.push_back(c);
  }
  cs.push_back({"MSE [N,3,2]", spec(K::MeanSquaredError), uniform({4, 3, 2}, -2, 2),
                uniform({4, 3, 2}, -2, 2), "F.mse_loss(y, t)"});
  {
    // An exact zero difference: PyTorch's gradient there is sign(0) = 0.
    LossCase c{"L1 [N,3], a zero difference", spec(K::L1),       uniform({5, 3}, -2, 2),
               uniform({5, 3}, -2, 2),        "F.l1_loss(y, t)", false};
    c.target.data<double>()[4] = c.y.data<double>()[4];
    cs.push_back(c);
  }
  cs.push_back(
      {"L1 [N,3]", spec(K::L1), uniform({5, 3}, -2, 2), uniform({5, 3}, -2, 2), "F.l1_loss(y, t)"});
  cs.push_back({"Huber delta 0.5 [N,4]", spec(K::Huber, 0, 0.5), uniform({6, 4}, -1.5, 1.5),
                uniform({6, 4}, -1.5, 1.5), "F.huber_loss(y, t, delta=0.5)"});
  cs.push_back({"Huber delta 1 [N,2,3]", spec(K::Huber), uniform({3, 2, 3}, -3, 3),
                uniform({3, 2, 3}, -3, 3), "F.huber_loss(y, t)"});
  cs.push_back({"BCE with logits [N,3]", spec(K::BinaryCrossEntropy), uniform({6, 3}, -4, 4),
                uniform({6, 3}, 0, 1), "F.binary_cross_entropy_with_logits(y, t)"});
  {
    // Logits at 0 (a zero-initialised head: the gradient is 0.5 - t there), far out, and hard
    // targets.
    LossCase c{
        "BCE with logits at 0 and +-40, hard targets",    spec(K::BinaryCrossEntropy),
        f64({2, 4}, {0, 0, 40, -40, 0.5, -0.5, 40, -40}), f64({2, 4}, {1, 0.3, 1, 0, 0, 1, 0, 1}),
        "F.binary_cross_entropy_with_logits(y, t)",       false};
    cs.push_back(c);
  }
  return cs;
}

}  // namespace

TEST_CASE("losses: value and gradient against PyTorch 1.13, finite differences of the eval graph") {
  const std::vector<LossCase> cs = cases();
  const auto want = torch_results(cs);
  if (want.empty()) MESSAGE("skipped the PyTorch comparison: /usr/bin/python3 has no torch");
  auto dev = make_cpu_device(1);
  for (size_t k = 0; k < cs.size(); ++k) {
    const LossCase& c = cs[k];
    CAPTURE(c.name);
    const auto [loss, dy] = ours(c, *dev);
    if (!want.empty()) {
      REQUIRE(want[k].size() == dy.size() + 1);
      CHECK(loss == doctest::Approx(want[k][0]).epsilon(1e-12));
      for (size_t i = 0; i < dy.size(); ++i) {
        CAPTURE(i);
        CHECK(dy[i] == doctest::Approx(want[k][i + 1]).epsilon(1e-10).scale(1e-3));
      }
    }
    // The eval graph: the same loss in f32 as its last output, the target its last input.
    LossNodes nodes;
    const Graph eval = build_eval_graph(model(c.y.dims), c.spec, &nodes);
    CHECK(eval.outputs.back() == nodes.loss);
    CHECK(eval.inputs.back() == nodes.target);
    CHECK(eval_loss(eval, c, c.y, *dev) == doctest::Approx(loss).epsilon(1e-6));
    if (!c.finite_differences) continue;
    // Central differences in f64 through the training graph's loss output (the eval graph's is
    // f32): a fresh training graph per step is slow, so the model input x moves instead of P.
    Graph g = model(c.y.dims);
    TrainingGraph t = build_training_graph(g, c.spec);
    Executor ex(t.graph, *dev, c.y.dims[0]);
    ex.set_input(1, c.target);
    auto loss_at = [&](const Tensor& y) {
      ex.set_input(0, y);
      ex.run();
      return ex.output(0).real_at(0);
    };
    const double h = 1e-6;
    for (int64_t i = 0; i < c.y.numel(); ++i) {
      Tensor up = c.y, down = c.y;
      up.data<double>()[i] += h;
      down.data<double>()[i] -= h;
      const double fd = (loss_at(up) - loss_at(down)) / (2 * h);
      CAPTURE(i);
      CHECK(fd == doctest::Approx(dy[static_cast<size_t>(i)]).epsilon(1e-6).scale(1e-4));
    }
  }
}

TEST_CASE("losses: --loss choices, settings and their errors") {
  Graph g;
  g.opset = kEmitOpset;
  GraphBuilder b(g, "m");
  ValueId x = b.input("x", DType::F32, {Dim::N(), Dim::of(4)});
  ValueId logits = b.op("Identity", {x});
  g.value(logits).name = "logits";
  ValueId seq = b.op("Reshape", {x, b.ints({-1, 2, 2})});
  g.value(seq).name = "seq";
  ValueId loss = b.op("ReduceMean", {x}, {{"keepdims", int64_t{0}}});
  g.value(loss).name = "loss";
  // [N,N]: a class dim that depends on the batch
  ValueId wide =
      b.op("MatMul", {x, b.op("Transpose", {x}, {{"perm", std::vector<int64_t>{1, 0}}})});
  g.value(wide).name = "wide";
  g.outputs = {logits, seq, loss, wide};
  using test::contains;
  using test::error_of;

  // auto as before: the scalar output is the model's loss.
  CHECK(choose_loss(g, "auto", "").kind == LossKind::ModelOutput);
  CHECK(choose_loss(g, "auto", "logits").kind == LossKind::SoftmaxCrossEntropy);
  // cross-entropy: the [N,C] classifier first; [N,T,C] named: class axis 2.
  LossSpec ce = choose_loss(g, "cross-entropy", "");
  CHECK(ce.output == "logits");
  CHECK(ce.class_axis == 1);
  ce = choose_loss(g, "cross-entropy", "seq");
  CHECK(ce.class_axis == 2);
  LossSpec settings;
  settings.class_axis = 1;
  settings.label_smoothing = 0.1;
  ce = choose_loss(g, "cross-entropy", "seq", settings);
  CHECK(ce.class_axis == 1);
  CHECK(ce.label_smoothing == 0.1);
  CHECK(choose_loss(g, "l1", "logits").kind == LossKind::L1);
  CHECK(choose_loss(g, "huber", "logits").kind == LossKind::Huber);
  CHECK(choose_loss(g, "bce", "seq").kind == LossKind::BinaryCrossEntropy);
  const LossSpec own = choose_loss(g, "output:loss", "");
  CHECK(own.kind == LossKind::ModelOutput);
  CHECK(own.output == "loss");
  CHECK(choose_loss(g, "model", "").output == "loss");

  // Errors name the outputs and the choices.
  std::string e = error_of([&] { choose_loss(g, "hinge", ""); });
  CHECK(contains(e, "unknown --loss 'hinge'"));
  CHECK(contains(e, "output:NAME"));
  e = error_of([&] { choose_loss(g, "output:logits", ""); });
  CHECK(contains(e, "'logits' is f32[N,4], not a scalar loss"));
  CHECK(contains(e, "'loss'"));
  e = error_of([&] { choose_loss(g, "output:nope", ""); });
  CHECK(contains(e, "no output 'nope'"));
  CHECK(contains(e, "logits, seq, loss, wide"));
  CHECK(contains(error_of([&] { choose_loss(g, "output:loss", "logits"); }), "different outputs"));
  settings = {};
  settings.class_axis = 3;
  e = error_of([&] { choose_loss(g, "cross-entropy", "seq", settings); });
  CHECK(contains(e, "--class-axis 3 is out of range for output 'seq' [N,2,2]"));
  settings.class_axis = 0;
  CHECK(contains(error_of([&] { choose_loss(g, "cross-entropy", "logits", settings); }),
                 "--class-axis 0 is out of range"));
  e = error_of([&] { choose_loss(g, "cross-entropy", "wide"); });
  CHECK(contains(e, "output 'wide' is [N,N]: its class dim (axis 1) is not static"));
  settings = {};
  settings.label_smoothing = 1;
  CHECK(contains(error_of([&] { choose_loss(g, "cross-entropy", "", settings); }),
                 "--label-smoothing must be in [0, 1)"));
  settings = {};
  settings.huber_delta = 0;
  CHECK(contains(error_of([&] { choose_loss(g, "huber", "logits", settings); }),
                 "--huber-delta must be positive"));
  // Cross-entropy over an output of one class, and a model loss that is not a scalar, from the
  // graph builders too.
  CHECK(contains(error_of([&] {
                   append_loss(g, {LossKind::ModelOutput, "logits"});
                 }),
                 "not a scalar loss"));

  CHECK(is_loss_choice("output:x"));
  CHECK(!is_loss_choice("output:"));
  CHECK(!is_loss_choice("CE"));
}

TEST_CASE("losses: the training graph records the resolved loss; the checkpoint record keeps it") {
  Graph g = model({2, 3, 4});
  LossSpec s = spec(LossKind::SoftmaxCrossEntropy, 0.1);
  s.ignore_index = 7;
  const TrainingGraph t = build_training_graph(g, s);
  CHECK(t.spec.class_axis == 2);
  CHECK(t.spec.ignore_index == 7);
  CHECK(t.spec.label_smoothing == 0.1);
  CHECK(t.target_dtype == DType::I64);
  CHECK(t.target_shape == shape_of({2, 3}));
  const TrainingGraph h = build_training_graph(model({2, 3}), spec(LossKind::Huber, 0, 0.25));
  CHECK(h.target_dtype == DType::F64);
  CHECK(h.target_shape == shape_of({2, 3}));
  CHECK(h.spec.class_axis == -1);

  for (LossSpec l : {t.spec, h.spec, LossSpec{}, spec(LossKind::BinaryCrossEntropy)}) {
    const std::string rec = loss_record(l);
    CAPTURE(rec);
    const LossSpec back = parse_loss_record(rec, "x");
    CHECK(back.kind == l.kind);
    CHECK(back.output == l.output);
    CHECK(back.class_axis == l.class_axis);
    CHECK(back.ignore_index == l.ignore_index);
    CHECK(back.label_smoothing == l.label_smoothing);
    CHECK(back.huber_delta == l.huber_delta);
  }
  CHECK(loss_record(spec(LossKind::MeanSquaredError)) == "mse y");  // as before
  LossSpec none = spec(LossKind::SoftmaxCrossEntropy);
  none.ignore_index = std::nullopt;
  CHECK(!parse_loss_record(loss_record(none), "x").ignore_index);
  CHECK(test::contains(test::error_of([] { parse_loss_record("mse;bogus=1 y", "ck"); }),
                       "unknown setting 'bogus'"));
}

TEST_CASE("losses: a final Softmax over the class axis of [N,T,C] is read through; describe_loss") {
  // y = Softmax(x + P, axis -1) over [2,3,4]: cross-entropy reads the logits under it, so the
  // loss equals the one on a model without the Softmax.
  Graph soft = model({2, 3, 4});
  {
    GraphBuilder b(soft, "m");
    ValueId p = b.op("Softmax", {soft.outputs[0]}, {{"axis", int64_t{-1}}});
    soft.value(soft.outputs[0]).name = "logits";
    soft.value(p).name = "y";
    soft.outputs = {p};
  }
  LossSpec s = spec(LossKind::SoftmaxCrossEntropy, 0.1);
  const TrainingGraph t = build_training_graph(soft, s);
  CHECK(t.output_form == OutputForm::Probabilities);
  CHECK(soft.value(t.output).name == "y");
  auto dev = make_cpu_device(1);
  const Tensor y = uniform({2, 3, 4}, -2, 2), lab = labels({2, 3}, 4, 4);
  auto loss_of = [&](const TrainingGraph& tg) {
    Executor ex(tg.graph, *dev, 2);
    ex.set_input(0, y);
    ex.set_input(1, lab);
    ex.run();
    return ex.output(0).real_at(0);
  };
  CHECK(loss_of(t) == doctest::Approx(loss_of(build_training_graph(model({2, 3, 4}), s))));
  const std::string d = describe_loss(soft, s);
  CAPTURE(d);
  CHECK(test::contains(d, "the logits under the model's final Softmax"));
  CHECK(test::contains(d, "classes on axis 2"));
  CHECK(test::contains(d, "label smoothing 0.1"));
  CHECK(test::contains(describe_loss(model({2, 3}), spec(LossKind::Huber, 0, 0.5)),
                       "Huber on 'y' (delta 0.5)"));
}

// An mse (or l1, huber) over one-hot rows the trainer makes from class labels: the evaluation
// scores each output row's argmax against its label (it reported 0% before: the metrics' count
// of a loss without accuracy overwrote the labels' count).
TEST_CASE("losses: an mse on class labels is scored by each row's argmax against its label") {
  const char* fashion = "/usr/share/datasets/fashion-mnist";
  if (!test::need(std::string(fashion) + "/train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  Dataset d = load_dataset(fashion);
  d.train = std::make_shared<ImageSet>(test::mem(d.train).head(512));
  const ImageSet test_set = test::mem(d.test).head(64);
  d.test = std::make_shared<ImageSet>(test_set);
  ImportResult r = import_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  test::CpuSetup setup;
  setup.opts.batch = 16;
  setup.opts.learners = 1;
  test::CpuTrainer t(r.graph, {LossKind::MeanSquaredError, ""}, setup);
  RunOptions ro;
  ro.steps = 30;
  ro.schedule.lr = 0.05;
  train(t, d, ro);
  const EvalResult e = t.evaluate(test_set);
  int64_t correct = 0;
  for (int64_t begin = 0; begin < test_set.count; begin += 16) {
    Batch b;
    b.inputs.resize(1);
    test_set.slice(begin, std::min<int64_t>(16, test_set.count - begin), b.inputs[0], b.target);
    const Tensor out = t.eval_outputs(b)[0];
    for (int64_t i = 0; i < out.dims[0]; ++i) {
      int64_t arg = 0;
      for (int64_t j = 1; j < out.dims[1]; ++j)
        if (out.real_at(i * out.dims[1] + j) > out.real_at(i * out.dims[1] + arg)) arg = j;
      correct += arg == b.target.data<int64_t>()[i];
    }
  }
  CHECK(e.count == 64);
  CHECK(correct > 6);  // trained past chance (1 in 10)
  CHECK(e.correct == correct);
  CHECK(e.accuracy == doctest::Approx(static_cast<double>(correct) / 64));
  CHECK(e.mae.has_value());  // the regression metrics of the one-hot rows stay
}
