// Golden forward tests: every zoo model, at both opsets, on a fixed input, gives PyTorch's
// output (fixtures from models/export_zoo.py): in evaluation mode (BatchNorm running statistics,
// no dropout) and, for models without dropout, in training mode (batch statistics). Tolerance:
// max |got - want| <= 1e-4 * max |want|. Also cb-run end to end on one model.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/executor.h"
#include "runtime/passes.h"
#include "tests/test_util.h"

using namespace cb;
namespace fs = std::filesystem;

namespace {
const char* const kModels[] = {"mlp",      "lenet5",   "resnet20",     "transformer",
                               "resnet18", "resnet50", "mobilenet_v2", "vgg11_bn"};

double rel_max_diff(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dims == want.dims);
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, std::abs(got.real_at(i) - want.real_at(i)));
    scale = std::max(scale, std::abs(want.real_at(i)));
  }
  return diff / std::max(scale, 1e-12);
}

Tensor run_forward(const std::string& model, const Tensor& input, bool training, Device& dev) {
  ImportResult r = import_model(model);
  set_training(r.graph, training);
  Executor ex(r.graph, dev, input.dims.at(0));
  ex.set_input(0, input);
  ex.run();
  return ex.output(0);
}
}  // namespace

TEST_CASE("golden forward: zoo models equal PyTorch") {
  auto dev = make_cpu_device(2);
  int checked = 0, skipped = 0;
  for (const char* name : kModels) {
    fs::path fx = fs::path(CB_SOURCE_DIR) / "models" / "fixtures" / name;
    if (!test::need(fx / "input.pb",
                    "the model's golden fixtures, written with it by models/export_zoo.py "
                    "(./setup.sh, needs python3-torch)")) {
      ++skipped;
      continue;
    }
    Tensor input = *read_tensor_file((fx / "input.pb").string());
    for (int opset : {13, 17}) {
      std::string model = fmt::format("{}/models/{}_op{}.onnx", CB_SOURCE_DIR, name, opset);
      if (!test::need(model,
                      "a big zoo model, exported by ./setup.sh (models/export_zoo.py "
                      "--big, needs python3-torch)")) {
        ++skipped;
        continue;
      }
      for (std::string mode : {"eval", "train"}) {
        fs::path want_file = fx / (mode + ".pb");
        if (!fs::exists(want_file)) continue;  // train mode only for models without dropout
        CAPTURE(model);
        CAPTURE(mode);
        Tensor want = *read_tensor_file(want_file.string());
        Tensor got = run_forward(model, input, mode == "train", *dev);
        double d = rel_max_diff(got, want);
        CAPTURE(d);
        CHECK(d <= 1e-4);
        ++checked;
      }
    }
  }
  // Every model at two opsets, in eval mode and, for the 5 without dropout (all but the
  // Transformer, VGG-11-BN and MobileNetV2), in train mode: 26. The committed small models alone
  // (4 eval + 3 train, at two opsets): 14.
  CHECK(checked >= (skipped ? 14 : 26));
}

TEST_CASE("golden forward: cb-run writes PyTorch's output") {
  fs::path out = fs::temp_directory_path() / "cb_run_golden";
  fs::remove_all(out);
  std::string fx = CB_SOURCE_DIR "/models/fixtures/lenet5";
  std::string cmd = fmt::format(
      "{}/cb-run {}/models/lenet5_op17.onnx --input input={}/input.pb "
      "--output-dir {} > /dev/null",
      CB_BINARY_DIR, CB_SOURCE_DIR, fx, out.string());
  int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  Tensor got = *read_tensor_file((out / "logits.pb").string());
  Tensor want = *read_tensor_file(fx + "/eval.pb");
  CHECK(rel_max_diff(got, want) <= 1e-4);
  fs::remove_all(out);
}

TEST_CASE("golden forward: cb-run runs each node as the file says; --eval-mode forces inference") {
  // ResNet-20 is exported in training mode: BatchNormalization normalises with the batch
  // statistics unless --eval-mode asks for the running ones.
  fs::path out = fs::temp_directory_path() / "cb_run_modes";
  fs::remove_all(out);
  const std::string fx = CB_SOURCE_DIR "/models/fixtures/resnet20";
  if (!test::need(fx + "/train.pb", "the ResNet-20 fixtures (models/export_zoo.py)")) return;
  auto run = [&](const std::string& flags, const std::string& dir) {
    const std::string cmd = fmt::format(
        "{}/cb-run {}/models/resnet20_op17.onnx --input input={}/input.pb --output-dir {} {} "
        "> /dev/null 2>&1",
        CB_BINARY_DIR, CB_SOURCE_DIR, fx, (out / dir).string(), flags);
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  REQUIRE(run("", "file") == 0);
  REQUIRE(run("--eval-mode", "eval") == 0);
  CHECK(rel_max_diff(*read_tensor_file((out / "file/logits.pb").string()),
                     *read_tensor_file(fx + "/train.pb")) <= 1e-4);
  CHECK(rel_max_diff(*read_tensor_file((out / "eval/logits.pb").string()),
                     *read_tensor_file(fx + "/eval.pb")) <= 1e-4);
  CHECK(run("--eval-mode --train-mode", "both") == 2);  // a usage error
  fs::remove_all(out);
}
