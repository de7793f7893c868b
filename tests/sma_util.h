// Shared by the SMA tests (test_sma.cpp, test_train_loop.cpp, test_auto_tuner.cpp,
// test_collective.cpp, test_cb_train_cli.cpp): LeNet-5 trainer options, file-order batches of
// Fashion-MNIST, and a one-Gemm model small enough to check by hand.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/graph_builder.h"
#include "sma/trainer.h"
#include "tests/trainer_util.h"

namespace cb::test::sma {

inline const char* const kFashion = "/usr/share/datasets/fashion-mnist";
inline const std::string kLenet = CB_SOURCE_DIR "/models/lenet5_op17.onnx";

inline CpuSetup lenet_options(std::vector<int> cores, int devices, int learners) {
  CpuSetup o;
  o.opts.batch = 16;
  o.opts.momentum = 0.9;
  o.cores = std::move(cores);
  o.devices = devices;
  o.opts.learners = learners;
  return o;
}

// Batches `first`, `first + 1`, ... of the training set in file order.
inline std::vector<Batch> file_batches(const ImageSet& set, int64_t first, int count,
                                       int64_t batch) {
  std::vector<Batch> v(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    v[i].inputs.resize(1);
    set.slice((first + i) * batch, batch, v[i].inputs[0], v[i].target);
  }
  return v;
}

// ---- the one-Gemm model: y = x W^T + b, x [N,4], W [3,4], b [3], MSE against one-hot labels ----

constexpr int kIn = 4, kOut = 3;

inline Graph gemm_graph(const std::vector<float>& w, const std::vector<float>& b, bool bias = true,
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

inline Batch gemm_batch(const std::vector<float>& x, const std::vector<int64_t>& labels) {
  Batch b;
  b.inputs.resize(1);
  const auto n = static_cast<int64_t>(labels.size());
  b.inputs[0].dtype = DType::F32;
  b.inputs[0].dims = {n, kIn};
  b.inputs[0].bytes.resize(x.size() * sizeof(float));
  std::memcpy(b.inputs[0].bytes.data(), x.data(), b.inputs[0].bytes.size());
  b.target.dtype = DType::I64;
  b.target.dims = {n};
  b.target.bytes.resize(labels.size() * sizeof(int64_t));
  std::memcpy(b.target.bytes.data(), labels.data(), b.target.bytes.size());
  return b;
}

// theta = [W (12), pad to 16, b (3), pad to 32] in the flat layout.
constexpr int kWOff = 0, kBOff = 16;

// 16 random 1x2x2 examples (kIn pixels) with labels i % kOut, as training and test set.
inline Dataset tiny_data(std::mt19937& rng) {
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

}  // namespace cb::test::sma
