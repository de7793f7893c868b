// ONNX ModelProto -> IR. The only part of crossbow that sees protobuf types.
//
// import_model() validates everything a bad file can get wrong and throws cb::Error with the file,
// node, op or shape at fault; it never returns a half-built graph. After reading, it infers every
// shape and dtype through the op catalog, folds constant and shape-arithmetic subgraphs (in terms
// of the batch size N), drops dead nodes, and classifies initializers as parameters, state or
// constants.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace cb {

struct ImportOptions {
  // Lenient: nodes whose op is not in the catalog are kept (outputs of unknown shape) and
  // reported as blockers instead of failing the import. For cb-inspect on any model.
  bool lenient = false;
  // Graph inputs to treat as constants with these values (the ONNX test suite's input files).
  std::map<std::string, TensorPtr> constant_inputs;

  // ---- Concrete sizes at load. A symbolic dimension (dim_param or an unnamed one) at axis 0 of
  // a graph input is the batch N, as is every other dimension with that name. Every other
  // symbolic dimension must get a concrete size, from (first match wins):
  //   dims[name]                      (--dim NAME=N)
  //   input_shapes[input][axis]       (--input-shape NAME=AxBxC, or the dims of an input file)
  //   input_values[input]->dims[axis] (input files)
  //   size_of(input, axis, rank)      (a tool's own rule: cb-train's image size)
  // else the import fails naming the input, axis and name, followed by `sizes_hint` (how the
  // tool takes sizes: "with --dim NAME=N or ...").
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Values of graph inputs known at load (cb-run's input files). An input whose values decide a
  // shape (it reaches a value input of some node: Reshape's shape, Slice's starts, Pad's pads,
  // axes) or an If's condition is bound as a constant, as the ONNX test suite's runner does; the
  // others stay inputs whose sizes the values give.
  std::map<std::string, TensorPtr> input_values;
  std::function<std::optional<int64_t>(const std::string& input, size_t axis, size_t rank)> size_of;
  std::string sizes_hint;
  // Re-batching (cb-train on a model exported with a fixed batch, e.g. 1): the fixed leading
  // dimension B of the graph inputs becomes the batch N. The import fails, saying why, when the
  // graph ties the batch to B elsewhere (shape arithmetic that does not carry N through, or an
  // output declared with leading B that does not come out as N).
  bool rebatch = false;
  // Fold shape arithmetic and drop dead nodes (off: keep the graph exactly as in the file).
  bool fold = true;
};

struct Blocker {
  std::string node;
  std::string op_type;
  std::string reason;
};

struct ImportResult {
  Graph graph;
  std::vector<Blocker> blockers;  // nodes that keep the model from being trained (lenient mode)
  int64_t nodes_in_file = 0;
  int64_t nodes_folded = 0;  // constant/shape nodes folded away
  int64_t nodes_dead = 0;    // nodes removed because no output reaches a graph output
  // Symbolic dimensions given a concrete size at load (name -> size; unnamed ones as
  // "input:axis"), and the graph inputs bound as constants from ImportOptions::input_values.
  std::map<std::string, int64_t> sizes_bound;
  std::vector<std::string> inputs_bound;
  int64_t rebatched_from = 0;  // ImportOptions::rebatch: the fixed batch made N (0: none)
};

// Reads and imports `path`. Throws cb::Error on any problem (in strict mode, also on blockers,
// listing every one of them).
ImportResult import_model(const std::string& path, const ImportOptions& opts = {});
// Same, from bytes in memory; `dir` is where external data is looked up ("" forbids it).
ImportResult import_model_bytes(const std::string& bytes, const std::string& name,
                                const std::string& dir, const ImportOptions& opts = {});

// Reads one ONNX TensorProto file (the test suite's input_0.pb format).
TensorPtr read_tensor_file(const std::string& path);

constexpr int64_t kMinOpset = 7, kMaxOpset = 18;
constexpr int64_t kMinIrVersion = 3, kMaxIrVersion = 9;

}  // namespace cb
