// ONNX conformance: every one-node test of a catalog op in the ONNX backend suite
// (libonnx-testdata, data/node/*) runs through the importer, the memory planner, the executor
// and the CPU kernels; outputs are compared with output_K.pb (f32/f64: |got-want| <=
// atol + rtol*|want| with rtol 1e-3, atol 1e-5; integers and bool exactly; NaN matches NaN).
// Inputs that the op needs before execution (value inputs: Reshape's shape, Slice's starts...)
// are bound as constants; all others are fed at run time.
//
// tests/onnx_conformance_expected.txt lists the tests that must pass; `# name: reason` lines
// say why the others do not. A listed test that fails, fails CI; newly passing ones are
// reported so they can be added. Without the suite installed the test is skipped with a message,
// or fails when CI is set (test::need).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "importer/onnx_importer.h"
#include "kernels/cpu/cpu_device.h"
#include "runtime/error.h"
#include "runtime/executor.h"
#include "tests/onnx_suite.h"
#include "tests/test_util.h"

using namespace cb;
using namespace cb::testing;

namespace {

const std::string kExpectedFile = CB_SOURCE_DIR "/tests/onnx_conformance_expected.txt";

struct Outcome {
  bool pass;
  std::string detail;
};

Outcome run_test(const SuiteTest& t, Device& dev) {
  const fs::path data = t.dir / "test_data_set_0";
  const auto& gp = t.model.graph();
  const OpDef* def = find_op(gp.node(0).op_type());
  // Which graph inputs feed value inputs of the node: those are bound as constants.
  std::set<std::string> value_inputs;
  for (int i = 0; i < gp.node(0).input_size(); ++i)
    if ((def->value_inputs >> i) & 1u) value_inputs.insert(gp.node(0).input(i));
  std::set<std::string> inits;
  for (const auto& init : gp.initializer()) inits.insert(init.name());
  try {
    ImportOptions opts;
    std::map<std::string, TensorPtr> feeds;
    int k = 0;
    for (const auto& in : gp.input()) {
      if (inits.count(in.name())) continue;
      fs::path f = data / fmt::format("input_{}.pb", k++);
      if (!fs::exists(f) || !in.type().has_tensor_type()) continue;
      TensorPtr tensor = read_suite_tensor(f, in.type());
      if (!tensor) return {false, "cannot read " + f.string()};
      if (value_inputs.count(in.name()))
        opts.constant_inputs[in.name()] = tensor;
      else
        feeds[in.name()] = tensor;
    }
    ImportResult r = import_model((t.dir / "model.onnx").string(), opts);
    const Graph& g = r.graph;
    // Static-shape tests: the batch only matters for symbolic dims, take it from the feed.
    int64_t batch = 1;
    for (ValueId i : g.inputs)
      if (!g.value(i).shape.empty() && g.value(i).shape[0].batch)
        batch = feeds.at(g.value(i).name)->dims.at(0);
    Executor ex(g, dev, batch);
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      auto it = feeds.find(g.value(g.inputs[i]).name);
      if (it == feeds.end()) return {false, "no data for input " + g.value(g.inputs[i]).name};
      ex.set_input(i, *it->second);
    }
    ex.run();
    std::string diff;
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      TensorPtr want =
          read_suite_tensor(data / fmt::format("output_{}.pb", i), gp.output(int(i)).type());
      if (!want) return {false, fmt::format("cannot read output_{}.pb", i)};
      std::string d = compare(ex.output(i), *want);
      if (!d.empty())
        diff += fmt::format("{}output {} '{}': {}", diff.empty() ? "" : "; ", i,
                            g.value(g.outputs[i]).name, d);
    }
    return {diff.empty(), diff};
  } catch (const std::exception& e) {
    return {false, e.what()};
  }
}

}  // namespace

TEST_CASE("ONNX backend node tests run on the CPU") {
  fs::path suite = onnx_node_suite();
  if (!test::need(suite, kNodeSuiteHow)) return;
  std::vector<std::string> expected = read_expected(kExpectedFile);
  // Floors, as measured with Debian 12's libonnx-testdata (ONNX 1.12): the expected list and the
  // one-node tests of catalog ops found, so that a suite that runs nothing fails.
  REQUIRE_MESSAGE(expected.size() >= 481,
                  "expected passes read from " << kExpectedFile << ": " << expected.size());
  CHECK_MESSAGE(std::is_sorted(expected.begin(), expected.end()),
                "the expected list must be sorted");
  auto dev = make_cpu_device(2);
  std::map<std::string, Outcome> results;
  for (const SuiteTest& t : catalog_node_tests(suite)) results.emplace(t.name, run_test(t, *dev));
  int passed = 0;
  std::string fresh, failing;
  for (const auto& [name, o] : results) {
    bool listed = std::binary_search(expected.begin(), expected.end(), name);
    if (o.pass) {
      ++passed;
      if (!listed) fresh += "\n  " + name;
    } else {
      failing += fmt::format("\n  {}: {}", name, o.detail);
    }
  }
  MESSAGE("ONNX node tests, execution: " << passed << " / " << results.size()
                                         << " passed (tests of ops in the catalog)");
  if (!fresh.empty()) MESSAGE("newly passing, add to " << kExpectedFile << ":" << fresh);
  if (!failing.empty()) MESSAGE("not passing:" << failing);
  CHECK_MESSAGE(results.size() >= 519, "one-node tests of catalog ops found under "
                                           << suite.string() << ": " << results.size());
  size_t checked = 0;  // listed tests that ran and passed
  for (const std::string& name : expected) {
    auto it = results.find(name);
    if (it == results.end())
      FAIL_CHECK(name << " is listed but is not a one-node test of a catalog op");
    else if (!it->second.pass)
      FAIL_CHECK(name << " regressed: " << it->second.detail);
    else
      ++checked;
  }
  CHECK(checked == expected.size());
}
