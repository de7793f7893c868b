// The op catalog: one explicit list of every op crossbow understands (CB_OPS below), and for each
// op one OpDef that holds its whole contract: arity, how its attributes parse into a typed struct,
// its type/shape inference (which also folds shape arithmetic through `known` values), and its
// traits. Adding an op = one line in CB_OPS + one file in runtime/ops/ defining `ops::kOpName`.
// No self-registration, no switch(op) elsewhere: the planner, executor and autodiff read traits.
#pragma once

#include <any>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/graph.h"

namespace cb {

// Ops whose contract lives in runtime/ops/. Alphabetical.
#define CB_OPS(X)            \
  X(Abs)                     \
  X(Add)                     \
  X(And)                     \
  X(AveragePool)             \
  X(BatchNormalization)      \
  X(Cast)                    \
  X(Ceil)                    \
  X(Clip)                    \
  X(Concat)                  \
  X(Constant)                \
  X(ConstantOfShape)         \
  X(Conv)                    \
  X(ConvTranspose)           \
  X(Div)                     \
  X(Dropout)                 \
  X(Einsum)                  \
  X(Equal)                   \
  X(Erf)                     \
  X(Exp)                     \
  X(Expand)                  \
  X(Flatten)                 \
  X(Floor)                   \
  X(GRU)                     \
  X(Gather)                  \
  X(Gelu)                    \
  X(Gemm)                    \
  X(GlobalAveragePool)       \
  X(Greater)                 \
  X(GreaterOrEqual)          \
  X(HardSigmoid)             \
  X(HardSwish)               \
  X(Identity)                \
  X(If)                      \
  X(LSTM)                    \
  X(LayerNormalization)      \
  X(LeakyRelu)               \
  X(Less)                    \
  X(LessOrEqual)             \
  X(Log)                     \
  X(LogSoftmax)              \
  X(MatMul)                  \
  X(Max)                     \
  X(MaxPool)                 \
  X(Mean)                    \
  X(Min)                     \
  X(Mul)                     \
  X(Neg)                     \
  X(Not)                     \
  X(Or)                      \
  X(Pad)                     \
  X(Pow)                     \
  X(RNN)                     \
  X(Range)                   \
  X(Reciprocal)              \
  X(ReduceL1)                \
  X(ReduceL2)                \
  X(ReduceLogSum)            \
  X(ReduceLogSumExp)         \
  X(ReduceMax)               \
  X(ReduceMean)              \
  X(ReduceMin)               \
  X(ReduceProd)              \
  X(ReduceSum)               \
  X(ReduceSumSquare)         \
  X(Relu)                    \
  X(Reshape)                 \
  X(Resize)                  \
  X(Shape)                   \
  X(Sigmoid)                 \
  X(Slice)                   \
  X(Softmax)                 \
  X(SoftmaxCrossEntropyLoss) \
  X(Split)                   \
  X(Sqrt)                    \
  X(Squeeze)                 \
  X(Sub)                     \
  X(Sum)                     \
  X(Tanh)                    \
  X(Tile)                    \
  X(Transpose)               \
  X(Unsqueeze)               \
  X(Upsample)                \
  X(Where)                   \
  X(Xor)                     \
  CB_INTERNAL_OPS(X)

// Ops crossbow emits itself (gradients, optimizer and SMA steps, and the fused forms of patterns
// exporters spell out: runtime/passes.h); OpDef::internal, never read from a file.
#define CB_INTERNAL_OPS(X)       \
  X(AdamWStep)                   \
  X(AttentionHeads)              \
  X(AveragePoolGrad)             \
  X(BatchNormalizationGrad)      \
  X(ClipGrad)                    \
  X(ConvGrad)                    \
  X(DropoutGrad)                 \
  X(GatherGrad)                  \
  X(GeluGrad)                    \
  X(HardSigmoidGrad)             \
  X(HardSwishGrad)               \
  X(LayerNormalizationGrad)      \
  X(LayoutReorder)               \
  X(LeakyReluGrad)               \
  X(MaskedSoftmax)               \
  X(MaskedSoftmaxGrad)           \
  X(LogSoftmaxGrad)              \
  X(MaxPoolGrad)                 \
  X(PadGrad)                     \
  X(ReduceSumTo)                 \
  X(ReluGrad)                    \
  X(ResizeGrad)                  \
  X(SgdStep)                     \
  X(SliceGrad)                   \
  X(SmaCentralStep)              \
  X(SmaRowEma)                   \
  X(SmaRowSum)                   \
  X(SmaStep)                     \
  X(SoftmaxCrossEntropyLossGrad) \
  X(SoftmaxGrad)

enum class OpKind : uint16_t {
#define CB_OP_ENUM(n) n,
  CB_OPS(CB_OP_ENUM)
#undef CB_OP_ENUM
      Count
};

class ParseCtx;
class InferCtx;
class VjpCtx;
class LowerCtx;

struct OpDef {
  OpKind kind;
  std::string_view name;
  int inputs_min, inputs_max;  // inputs_max = -1: variadic
  int outputs_min, outputs_max;
  // Attributes -> typed params struct (stored in Node::params). nullptr: the op takes none.
  std::any (*parse)(ParseCtx&) = nullptr;
  // Output dtypes and shapes from inputs; may also set `known` integer contents of outputs.
  void (*infer)(InferCtx&) = nullptr;
  // bit i: input i is not differentiable (a float initializer used only here is a constant,
  // not a trainable parameter). Value inputs are never differentiable.
  uint32_t nondiff_inputs = 0;
  uint32_t state_inputs = 0;  // bit i: an initializer here is training state (BN statistics)
  uint32_t value_inputs = 0;  // bit i: this input's values must be known before execution
  // bit i: a float constant here is a weight, trainable even when the file stores it as a
  // Constant node (paddle2onnx, some tf2onnx exports) rather than an initializer.
  uint32_t weight_inputs = 0;
  // Memory traits, read by the planner. inplace_inputs bit i: output 0 may take input i's buffer
  // when input i dies at this node and has output 0's size. alias: output 0 is input 0's bytes
  // reinterpreted (Reshape, Flatten, Squeeze, Unsqueeze, Identity): no copy, one buffer.
  uint32_t inplace_inputs = 0;
  bool alias = false;
  // Ops that behave differently when training (BatchNormalization, Dropout) switch mode here.
  void (*set_training)(Node& n, bool training) = nullptr;
  // Reverse mode: emits the nodes computing the inputs' gradients (runtime/vjp.h). nullptr: the
  // op is not differentiable (a gradient reaching it is an error naming the node).
  void (*vjp)(VjpCtx& c) = nullptr;
  // Ops crossbow emits itself (gradient ops): never read from an ONNX file.
  bool internal = false;
  // Ops defined by a decomposition (LSTM, GRU, RNN, If, Einsum): once the graph is inferred, the
  // importer replaces each such node by the nodes this emits through the LowerCtx's builder
  // (runtime/lower.h), which then get inference, planning, kernels and vjps like any others.
  // Returns the values standing for the node's outputs (kNoValue for omitted ones). Such ops
  // need no kernel and no vjp.
  std::vector<ValueId> (*lower)(LowerCtx& c) = nullptr;
};

const OpDef& op_def(OpKind k);
// Default domain only; nullptr when unknown. Internal ops are found too (for GraphBuilder);
// the importer refuses them.
const OpDef* find_op(std::string_view name);
std::span<const OpDef* const> all_ops();

namespace ops {
#define CB_OP_DECL(n) extern const OpDef k##n;
CB_OPS(CB_OP_DECL)
#undef CB_OP_DECL
}  // namespace ops

// Reads a node's attributes for its op's parse(). Every attribute must be read (or the node is
// rejected naming the attribute), so nothing an exporter sets is silently ignored.
class ParseCtx {
 public:
  ParseCtx(const Graph& g, NodeId n);
  int64_t opset() const { return g_.opset_of(node_); }
  bool has(const std::string& name) const { return node_.attrs.count(name) != 0; }
  bool has_output(size_t i) const { return node_.has_output(i); }

  int64_t i(const std::string& name, int64_t def);
  std::optional<int64_t> opt_i(const std::string& name);
  float f(const std::string& name, float def);
  std::optional<float> opt_f(const std::string& name);
  std::string s(const std::string& name, const std::string& def);
  // A string attribute that names one of `choices` (absent: `def`), as its enum value; any other
  // string fails naming the attribute and the choices.
  template <typename E>
  E choice(const std::string& name, std::string_view def,
           std::initializer_list<std::pair<std::string_view, E>> choices) {
    const std::string v = s(name, std::string(def));
    std::string all;
    for (const auto& [text, e] : choices) {
      if (v == text) return e;
      all += fmt::format("{}{}", all.empty() ? "" : ", ", text);
    }
    fail("{} '{}' is not one of {}", name, v, all);
  }
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def = {});
  std::optional<std::vector<int64_t>> opt_ints(const std::string& name);
  std::optional<std::vector<std::string>> opt_strings(const std::string& name);
  TensorPtr tensor(const std::string& name);  // nullptr when absent
  // Fails unless the attribute is absent or equal to `expected` (for settings we do not support).
  void only(const std::string& name, int64_t expected, std::string_view why);
  void finish() const;  // rejects attributes nobody read

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(label() + " " + fmt::format(f, std::forward<Args>(args)...));
  }
  std::string label() const;

 private:
  const AttrValue* get(const std::string& name);
  const Graph& g_;
  NodeId id_;
  const Node& node_;
  std::set<std::string> read_;
};

// The view an op's infer() gets of one node. Outputs that the node omits are skipped by set().
class InferCtx {
 public:
  InferCtx(Graph& g, NodeId n) : g_(g), id_(n) {}
  const Node& node() const { return g_.nodes[static_cast<size_t>(id_)]; }
  int64_t opset() const { return g_.opset_of(node()); }
  template <typename T>
  const T& p() const {
    return node().p<T>();
  }

  // Params that inference completes from input shapes (resolved pads, inferred kernel shape).
  template <typename T>
  T& p_mut() {
    return std::any_cast<T&>(g_.nodes[static_cast<size_t>(id_)].params);
  }

  size_t num_inputs() const { return node().inputs.size(); }
  size_t num_outputs() const { return node().outputs.size(); }
  bool has_input(size_t i) const { return node().has_input(i); }
  bool has_output(size_t i) const { return node().has_output(i); }
  const Value& in(size_t i) const { return g_.value(node().inputs.at(i)); }
  DType dtype(size_t i) const { return in(i).dtype; }
  const Shape& shape(size_t i) const { return in(i).shape; }
  int64_t rank(size_t i) const { return static_cast<int64_t>(in(i).shape.size()); }
  const std::vector<Dim>* known(size_t i) const;
  // The input's known integer contents, or a clear error naming `what`.
  std::vector<Dim> known_dims(size_t i, std::string_view what) const;
  std::vector<int64_t> known_ints(size_t i, std::string_view what) const;  // static only
  const Tensor* data(size_t i) const { return in(i).data.get(); }

  void set(size_t i, DType t, Shape s);
  void set_known(size_t i, std::vector<Dim> v);
  void set_data(size_t i, TensorPtr t);  // a constant output: dtype, shape, data (and known)

  // Common checks, each failing with the node's label.
  void expect_rank(size_t i, int64_t r, std::string_view what) const;
  void expect_min_rank(size_t i, int64_t r, std::string_view what) const;
  void expect_float(size_t i, std::string_view what) const;
  void expect_same_dtype(size_t a, size_t b) const;
  int64_t axis(int64_t axis, int64_t rank, std::string_view what) const;

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(g_.node_label(id_) + " " + fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  Graph& g_;
  NodeId id_;
};

// Runs the node's parse() and infer(): used by the importer and by every pass that emits nodes.
void parse_node(Graph& g, NodeId n);
void infer_node(Graph& g, NodeId n);

}  // namespace cb
