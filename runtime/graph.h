// The IR: a graph of nodes over values, in topological order.
// Static description only (names, types, shapes, constant data); runtime storage lives in the
// executor's arenas. Values are referenced by index (ValueId); kNoValue marks an omitted optional
// input or output. Every node refers to its op's catalog entry (`def`), or to nullptr when the op
// is not in the catalog (only in a lenient import, for cb-inspect to report).
#pragma once

#include <any>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/attributes.h"
#include "runtime/dtype.h"
#include "runtime/shape.h"
#include "runtime/tensor.h"

namespace cb {

struct OpDef;

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t {
  Input,       // fed by the user (a graph input without initializer)
  Parameter,   // trainable initializer
  State,       // non-trainable initializer updated by training (BatchNorm running statistics)
  Constant,    // fixed data (initializers and Constant nodes that are not parameters)
  Activation,  // produced by a node
};
std::string_view value_kind_name(ValueKind k);

struct Value {
  std::string name;
  ValueKind kind = ValueKind::Activation;
  DType dtype = DType::F32;
  Shape shape;
  bool shape_known = false;  // false only downstream of an op the catalog does not know
  TensorPtr data;            // Parameter, State, Constant
  bool initializer = false;  // came from the model's initializers
  // The output of a Constant node in the file (its name kept): a weight when it feeds a weight
  // input (OpDef::weight_inputs) or is the bias added to one's output.
  bool constant_node = false;
  // Integer contents known before execution (shape arithmetic), possibly in terms of N.
  std::optional<std::vector<Dim>> known;
  NodeId producer = -1;
  // How an f32 activation [N, C, H, W] is stored on the CPU: row-major, or oneDNN's blocked
  // nChw16c ([N, C/16, H, W, 16]: channel c in block c/16, lane c%16; C a multiple of 16, so the
  // bytes are the same). Set by assign_blocked_layouts (runtime/passes.h); kernels see it as
  // TensorView::blocked.
  bool blocked = false;
  // An f32 activation stored rounded to bf16 (2 bytes an element), for --precision bf16 on the
  // CPU: the blocked activations between oneDNN's convolutions (assign_blocked_layouts with bf16
  // storage), and the row-major ones only bf16 matrix products read (assign_bf16_operands). The
  // value is still f32 to every op; the kernels that read or write such values convert.
  bool bf16_storage = false;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;          // "" for the default ONNX domain
  const OpDef* def = nullptr;  // nullptr: op not in the catalog
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  AttrMap attrs;  // as imported
  // Opset whose semantics the node follows: 0 = the graph's. Nodes emitted by crossbow (the
  // backward pass, losses) use kEmitOpset whatever the model's opset.
  int64_t opset = 0;
  std::any params;  // the op's typed attribute struct, set by its parse()

  template <typename T>
  const T& p() const {
    return std::any_cast<const T&>(params);
  }
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != kNoValue; }
  bool has_output(size_t i) const { return i < outputs.size() && outputs[i] != kNoValue; }
};

constexpr int64_t kEmitOpset = 17;

struct Graph {
  std::string name;
  int64_t opset = 0;  // default-domain opset
  int64_t ir_version = 0;
  std::string producer;
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;

  const Value& value(ValueId v) const { return values.at(static_cast<size_t>(v)); }
  Value& value(ValueId v) { return values.at(static_cast<size_t>(v)); }
  ValueId add_value(Value v);
  std::optional<ValueId> find_value(std::string_view name) const;
  // consumers()[v] lists the nodes reading value v (a node twice if it reads it twice).
  std::vector<std::vector<NodeId>> consumers() const;
  int64_t opset_of(const Node& n) const { return n.opset ? n.opset : opset; }
  // "[Conv node 'conv1']" -- the prefix of every message about a node.
  std::string node_label(NodeId n) const;
};

// Integer tensors small enough to be shape arithmetic get `known` contents at import time.
constexpr int64_t kKnownMaxElems = 1024;
std::optional<std::vector<Dim>> known_from_tensor(const Tensor& t);

// Parameter accounting for reports and tests.
struct ParamStats {
  int64_t count = 0;  // elements of trainable parameters
  int64_t bytes = 0;
  int64_t tensors = 0;
  int64_t state_count = 0;            // elements of non-trainable state (BN running statistics)
  int64_t constant_node_tensors = 0;  // parameter tensors the file stores as Constant nodes
};
ParamStats param_stats(const Graph& g);

}  // namespace cb
