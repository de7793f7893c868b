// What an op's vjp sees: the forward node, the gradients of its outputs, and a GraphBuilder to
// emit the backward nodes with. A vjp computes nothing: it emits IR, so the backward graph gets
// shape inference, planning and kernels as the forward does, and each op's meaning, vjp included,
// stays in its one file under runtime/ops/. Convention: set_dx(i, g) with g already of input i's
// shape and dtype (broadcasting undone with b.sum_to); inputs that do not need a gradient (need(i)
// false) may be skipped.
#pragma once

#include <vector>

#include "runtime/graph_builder.h"
#include "runtime/op_catalog.h"

namespace cb {

class VjpCtx {
 public:
  VjpCtx(GraphBuilder& b, NodeId n, std::vector<ValueId> dy, std::vector<bool> need)
      : b(b), id_(n), dy_(std::move(dy)), need_(std::move(need)), dx_(need_.size(), kNoValue) {}

  GraphBuilder& b;

  const Node& node() const { return b.graph().nodes[static_cast<size_t>(id_)]; }
  template <typename T>
  const T& p() const {
    return node().p<T>();
  }
  ValueId x(size_t i) const { return node().inputs.at(i); }
  ValueId y(size_t i) const { return node().outputs.at(i); }
  const Value& val(ValueId v) const { return b.value(v); }
  // By value: emitting nodes grows the value table, so references into it do not last.
  Shape x_shape(size_t i) const { return val(x(i)).shape; }
  // The gradient flowing into output i, or kNoValue.
  ValueId dy(size_t i) const { return i < dy_.size() ? dy_[i] : kNoValue; }
  bool need(size_t i) const { return i < need_.size() && need_[i]; }
  void set_dx(size_t i, ValueId g) { dx_.at(i) = g; }
  const std::vector<ValueId>& dx() const { return dx_; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw Error(fmt::format("[{} node '{}'] no gradient: ", node().op_type, node().name) +
                fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  NodeId id_;
  std::vector<ValueId> dy_;
  std::vector<bool> need_;
  std::vector<ValueId> dx_;
};

}  // namespace cb
