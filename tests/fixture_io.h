// Fixtures written by the Python reference scripts (models/training_fixtures.py,
// models/transformers.py, tests/rnn_fixtures.py): a GraphProto whose initializers are the named
// tensors; and the error measure the golden tests compare against them with.
#pragma once

#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "importer/tensor_proto.h"

namespace cb::test {

inline std::map<std::string, Tensor> read_fixture(const std::filesystem::path& path) {
  onnx::GraphProto g;
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(g.ParseFromIstream(&f), "cannot read the fixture " << path.string());
  std::map<std::string, Tensor> out;
  for (const auto& t : g.initializer()) out[t.name()] = *tensor_from_proto(t, path.string(), "");
  return out;
}

// max |got - want| / max |want|: the error relative to the tensor's scale.
inline double rel_err(const Tensor& got, const Tensor& want) {
  REQUIRE(got.numel() == want.numel());
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, std::abs(got.real_at(i) - want.real_at(i)));
    scale = std::max(scale, std::abs(want.real_at(i)));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace cb::test
