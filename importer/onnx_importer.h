// ONNX ModelProto -> IR. The only part of crossbow that sees protobuf types.
//
// import_model() validates everything a bad file can get wrong and throws cb::Error with the file,
// node, op or shape at fault; it never returns a half-built graph. After reading, it infers every
// shape and dtype through the op catalog, folds constant and shape-arithmetic subgraphs (in terms
// of the batch size N), drops dead nodes, and classifies initializers as parameters, state or
// constants.
#pragma once

#include <map>
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
