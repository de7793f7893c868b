// Shared by the tests that run the ONNX backend node suite (libonnx-testdata): where it is,
// which tests are one-node tests of catalog ops, reading its files, and the in-tree lists of
// expected passes (`name` lines, sorted; `# name: reason` lines explain the rest).
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "importer/tensor_proto.h"
#include "runtime/op_catalog.h"

namespace cb::testing {

namespace fs = std::filesystem;

// What test::need says when the suite is not there.
inline constexpr const char* kNodeSuiteHow =
    "the ONNX backend node tests, Debian's libonnx-testdata (./setup.sh installs it; "
    "CB_ONNX_NODE_TESTS=<dir> points the tests elsewhere)";

inline fs::path onnx_node_suite() {
  const char* env = std::getenv("CB_ONNX_NODE_TESTS");
  return env && *env ? fs::path(env) : fs::path("/usr/share/libonnx-testdata/data/node");
}

template <typename P>
bool parse_proto_file(const fs::path& path, P& proto) {
  std::ifstream f(path, std::ios::binary);
  return f && proto.ParseFromIstream(&f);
}

struct SuiteTest {
  std::string name;
  fs::path dir;
  onnx::ModelProto model;
};

// One-node tests of default-domain ops that the catalog claims, sorted by name.
inline std::vector<SuiteTest> catalog_node_tests(const fs::path& suite) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(suite))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::vector<SuiteTest> out;
  for (const fs::path& dir : dirs) {
    SuiteTest t{dir.filename().string(), dir, {}};
    if (!parse_proto_file(dir / "model.onnx", t.model) || t.model.graph().node_size() != 1)
      continue;
    const auto& node = t.model.graph().node(0);
    if (!(node.domain().empty() || node.domain() == "ai.onnx") || !find_op(node.op_type()))
      continue;
    out.push_back(std::move(t));
  }
  return out;
}

// A test data file; ONNX 1.12 stores bfloat16 data as UINT16, undone where the model says so.
inline TensorPtr read_suite_tensor(const fs::path& f, const onnx::TypeProto& declared) {
  onnx::TensorProto t;
  if (!parse_proto_file(f, t)) return nullptr;
  if (declared.tensor_type().elem_type() == onnx::TensorProto::BFLOAT16 &&
      t.data_type() == onnx::TensorProto::UINT16)
    t.set_data_type(onnx::TensorProto::BFLOAT16);
  return tensor_from_proto(t, f.string(), "");
}

// The expected passes: non-comment, non-empty lines.
inline std::vector<std::string> read_expected(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    out.push_back(line);
  }
  return out;
}

// "" when `got` matches the suite's `want`: f32/f64 |got-want| <= 1e-5 + 1e-3 |want| (NaN
// matches NaN, infinities exactly), integers and bool exactly; else what differs.
inline std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype != want.dtype)
    return fmt::format("dtype {} vs expected {}", dtype_name(got.dtype), dtype_name(want.dtype));
  if (got.dims != want.dims)
    return fmt::format("shape {} vs expected {}", to_string(shape_of(got.dims)),
                       to_string(shape_of(want.dims)));
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    bool ok;
    if (dtype_is_float(got.dtype)) {
      double g = got.real_at(i), w = want.real_at(i);
      if (std::isnan(w))
        ok = std::isnan(g);
      else if (std::isinf(w))
        ok = g == w;
      else {
        double err = std::abs(g - w);
        ok = err <= 1e-5 + 1e-3 * std::abs(w);
        worst = std::max(worst, err);
      }
    } else {
      ok = got.int_at(i) == want.int_at(i);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (!bad) return "";
  return fmt::format("{} of {} elements differ (first at {}: got {}, want {}; max abs err {:.3g})",
                     bad, got.numel(), first,
                     dtype_is_float(got.dtype) ? got.real_at(first) : double(got.int_at(first)),
                     dtype_is_float(got.dtype) ? want.real_at(first) : double(want.int_at(first)),
                     worst);
}

}  // namespace cb::testing
