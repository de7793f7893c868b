// Fixtures written by the Python reference scripts (models/training_fixtures.py,
// tests/rnn_fixtures.py): a GraphProto whose initializers are the named tensors.
#pragma once

#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>

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

}  // namespace cb::test
