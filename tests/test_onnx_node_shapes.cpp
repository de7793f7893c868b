// The ONNX backend node tests (libonnx-testdata, data/node/*) as an external oracle for shape
// inference: for every one-node test whose op the catalog claims, the model is imported with its
// input files bound as constants (so shape inputs such as Reshape's `shape` are known) and each
// graph output's inferred dtype and static shape is compared with the recorded output_K.pb.
// One quirk of the suite (ONNX 1.12) is undone here: bfloat16 data is stored as UINT16 tensors,
// so where the model declares BFLOAT16 a UINT16 file is read as BFLOAT16.
//
// tests/onnx_node_shapes_expected.txt lists the tests that must pass, one per line, sorted;
// `# name: reason` lines say why the others do not. A listed test that stops passing fails this
// test; a newly passing one is reported (MESSAGE) so it can be added. Without the suite installed
// (apt-get install libonnx-testdata) the test is skipped with a message, or fails when CI is set
// (test::need).
#include <doctest/doctest.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "importer/onnx_importer.h"
#include "importer/tensor_proto.h"
#include "runtime/error.h"
#include "runtime/op_catalog.h"
#include "tests/onnx_suite.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace cb;
using namespace cb::testing;

namespace {

const std::string kExpectedFile = CB_SOURCE_DIR "/tests/onnx_node_shapes_expected.txt";

enum class Outcome { Pass, Fail, Rejected };

struct Result {
  Outcome outcome;
  std::string detail;  // mismatch or error message
};

std::string onnx_shape(const onnx::TensorProto& t) {
  return fmt::format("[{}]", fmt::join(t.dims(), ","));
}

// Runs one test dir whose model is one node of a catalog op.
Result run_one(const fs::path& dir, const onnx::ModelProto& m) {
  const fs::path data = dir / "test_data_set_0";
  ImportOptions opts;
  opts.fold = false;
  try {
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) inits.insert(t.name());
    int k = 0;
    for (const auto& in : m.graph().input()) {
      if (inits.count(in.name())) continue;
      fs::path f = data / fmt::format("input_{}.pb", k++);
      if (!fs::exists(f)) break;  // an optional input without data
      // Sequences and optionals stay unbound: the importer rejects them with its own message.
      if (!in.type().has_tensor_type()) continue;
      TensorPtr t = read_suite_tensor(f, in.type());
      if (!t) return {Outcome::Fail, "cannot read " + f.string()};
      opts.constant_inputs[in.name()] = t;
    }
    ImportResult r = import_model((dir / "model.onnx").string(), opts);
    const Graph& g = r.graph;
    if (static_cast<int>(g.outputs.size()) != m.graph().output_size())
      return {Outcome::Fail, fmt::format("{} graph outputs, the model has {}", g.outputs.size(),
                                         m.graph().output_size())};
    std::string mismatch;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      onnx::TensorProto want;
      fs::path f = data / fmt::format("output_{}.pb", i);
      if (!parse_proto_file(f, want))
        return {Outcome::Fail, fmt::format("cannot read {}", f.string())};
      if (want.data_type() == onnx::TensorProto::UINT16 &&
          m.graph().output(static_cast<int>(i)).type().tensor_type().elem_type() ==
              onnx::TensorProto::BFLOAT16)
        want.set_data_type(onnx::TensorProto::BFLOAT16);
      const Value& v = g.value(g.outputs[i]);
      std::string got_shape = to_string(v.shape);
      bool same = v.shape_known && shape_is_static(v.shape) && got_shape == onnx_shape(want) &&
                  dtype_to_onnx(v.dtype) == want.data_type();
      if (!same)
        mismatch +=
            fmt::format("{}output {} '{}': expected {} {}, got {} {}", mismatch.empty() ? "" : "; ",
                        i, v.name, onnx_dtype_name(want.data_type()), onnx_shape(want),
                        onnx_dtype_name(dtype_to_onnx(v.dtype)), got_shape);
    }
    if (!mismatch.empty()) return {Outcome::Fail, mismatch};
    return {Outcome::Pass, ""};
  } catch (const Error& e) {
    return {Outcome::Rejected, e.what()};
  } catch (const std::exception& e) {  // InternalError and the like are bugs, not rejections
    return {Outcome::Fail, fmt::format("unexpected exception: {}", e.what())};
  }
}

}  // namespace

TEST_CASE("shape inference agrees with the ONNX backend node tests") {
  fs::path suite = onnx_node_suite();
  if (!test::need(suite, kNodeSuiteHow)) return;
  std::vector<std::string> expected = read_expected(kExpectedFile);
  // Floors, as measured with Debian 12's libonnx-testdata (ONNX 1.12): the expected list and the
  // one-node tests of catalog ops found, so that a suite that checks nothing fails.
  REQUIRE_MESSAGE(expected.size() >= 490,
                  "expected passes read from " << kExpectedFile << ": " << expected.size());
  CHECK_MESSAGE(std::is_sorted(expected.begin(), expected.end()),
                "the expected list must be sorted");
  CHECK_MESSAGE(std::adjacent_find(expected.begin(), expected.end()) == expected.end(),
                "the expected list has a duplicate");

  std::map<std::string, Result> results;
  for (const SuiteTest& t : catalog_node_tests(suite))
    results.emplace(t.name, run_one(t.dir, t.model));

  int passed = 0;
  std::string fails, rejects, fresh;
  for (const auto& [name, r] : results) {
    bool listed = std::binary_search(expected.begin(), expected.end(), name);
    if (r.outcome == Outcome::Pass) {
      ++passed;
      if (!listed) fresh += "\n  " + name;
    } else if (r.outcome == Outcome::Fail) {
      fails += fmt::format("\n  {}: {}", name, r.detail);
    } else {
      rejects += fmt::format("\n  {}: {}", name, r.detail);
    }
  }
  MESSAGE("ONNX node tests, shapes: " << passed << " / " << results.size()
                                      << " passed (tests of ops in the catalog)");
  if (!fresh.empty()) MESSAGE("newly passing, add to " << kExpectedFile << ":" << fresh);
  if (!fails.empty()) MESSAGE("shape mismatches:" << fails);
  if (!rejects.empty()) MESSAGE("rejected:" << rejects);

  CHECK_MESSAGE(results.size() >= 519, "one-node tests of catalog ops found under "
                                           << suite.string() << ": " << results.size());
  size_t checked = 0;  // listed tests that ran and passed
  for (const std::string& name : expected) {
    auto it = results.find(name);
    if (it == results.end()) {
      FAIL_CHECK(name << " is listed as passing but is not a one-node test of a catalog op");
      continue;
    }
    if (it->second.outcome != Outcome::Pass)
      FAIL_CHECK(name << " regressed: " << it->second.detail);
    else
      ++checked;
  }
  CHECK(checked == expected.size());
}
