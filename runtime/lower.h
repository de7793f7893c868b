// What an op's lower() sees (OpDef::lower): the node being replaced and a GraphBuilder to emit
// its decomposition with. Like a vjp, a lowering computes nothing: it emits catalog ops, so the
// decomposed graph gets inference, planning, kernels and gradients as if the file had them.
// Values stand for the node's outputs; lower_composites (runtime/passes.h) rewires them.
#pragma once

#include <vector>

#include "runtime/graph_builder.h"
#include "runtime/op_catalog.h"

namespace cb {

class LowerCtx {
 public:
  LowerCtx(GraphBuilder& b, NodeId n) : b(b), id_(n) {}

  GraphBuilder& b;

  const Node& node() const { return b.graph().nodes[static_cast<size_t>(id_)]; }
  template <typename T>
  const T& p() const {
    return node().p<T>();
  }
  bool has_input(size_t i) const { return node().has_input(i); }
  bool has_output(size_t i) const { return node().has_output(i); }
  ValueId x(size_t i) const { return node().inputs.at(i); }
  ValueId y(size_t i) const { return node().outputs.at(i); }
  // By value: emitting nodes grows the value table, so references into it do not last.
  Shape shape(ValueId v) const { return b.value(v).shape; }
  DType dtype(ValueId v) const { return b.value(v).dtype; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(fmt::format("[{} node '{}'] ", node().op_type, node().name) +
                fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  NodeId id_;
};

}  // namespace cb
