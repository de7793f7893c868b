// Emitting nodes into a graph after import: the backward pass, losses, and tests build graphs
// through this, and every node goes through its op's parse() and infer() exactly like an
// imported one, so emitted graphs get shape checks, planning and kernels for free.
// Emitted nodes follow kEmitOpset semantics, whatever the model's opset.
#pragma once

#include <any>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph.h"

namespace cb {

class GraphBuilder {
 public:
  GraphBuilder(Graph& g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}
  Graph& graph() { return g_; }
  const Value& value(ValueId v) const { return g_.value(v); }

  // A node of catalog op `op` with `outputs` outputs; returns their ids.
  std::vector<ValueId> emit(std::string_view op, std::vector<ValueId> inputs, AttrMap attrs = {},
                            size_t outputs = 1);
  ValueId op(std::string_view op, std::vector<ValueId> inputs, AttrMap attrs = {}) {
    return emit(op, std::move(inputs), std::move(attrs), 1)[0];
  }
  // A node whose typed params are given (gradient ops reuse their forward op's params struct).
  std::vector<ValueId> emit_with(std::string_view op, std::vector<ValueId> inputs, std::any params,
                                 size_t outputs = 1);

  // Drops output `v` from its node (the kernel then skips computing it): for multi-output
  // gradient ops whose outputs are not all needed.
  void omit(ValueId v);

  ValueId constant(Tensor t, std::string_view hint = "const");
  ValueId scalar(double v, DType t);
  ValueId ints(const std::vector<int64_t>& v);  // i64 [v.size()]
  // An i64 [rank] constant holding `s` (in terms of N where the batch enters).
  ValueId shape_of(const Shape& s);
  // A graph input (labels for a loss, ...).
  ValueId input(std::string name, DType t, Shape s);

  // Sums `g` over broadcast dims down to `target` (the vjp of numpy broadcasting); `g` itself
  // when the shapes already agree.
  ValueId sum_to(ValueId g, Shape target);
  // `g` reshaped to `target` (same element count); `g` itself when equal.
  ValueId reshape_to(ValueId g, Shape target);

 private:
  std::string fresh_name(std::string_view op);
  std::vector<ValueId> emit_node(std::string_view op, std::vector<ValueId> inputs, AttrMap attrs,
                                 std::any params, size_t outputs);
  Graph& g_;
  std::string prefix_;
  int counter_ = 0;
};

}  // namespace cb
