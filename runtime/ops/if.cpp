// If(cond, then_0..then_{n-1}, else_0..else_{n-1}) -> n outputs. The importer inlines both
// branches' subgraphs into the main graph (importer/onnx_importer.cpp) and passes their outputs
// here as inputs; this op only selects. When `cond` is known at import (a constant, folded shape
// arithmetic) it becomes the chosen branch (the other one is never inferred and is dropped);
// otherwise both branches run and each output is Where(cond, then, else), which needs the two
// branches' outputs to agree in dtype and shape.
#include "runtime/lower.h"
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {

// The branch `cond` selects when it is known at import: 0 then, 1 else, -1 unknown.
int chosen(const std::vector<Dim>* k) {
  if (!k || k->size() != 1 || (*k)[0].batch) return -1;
  return (*k)[0].value != 0 ? 0 : 1;
}

size_t outputs(const Node& n) { return (n.inputs.size() - 1) / 2; }

void infer(InferCtx& c) {
  if (c.dtype(0) != DType::Bool) c.fail("cond must be bool, got {}", dtype_name(c.dtype(0)));
  if (c.num_inputs() % 2 != 1 || outputs(c.node()) != c.num_outputs())
    throw InternalError(c.node().name + ": If takes cond and both branches' outputs");
  auto n = c.num_outputs();
  int pick = chosen(c.known(0));
  for (size_t i = 0; i < n; ++i) {
    if (pick >= 0) {
      size_t from = 1 + static_cast<size_t>(pick) * n + i;
      if (!c.has_input(from))
        c.fail("the {} branch gives no output {}", pick == 0 ? "then" : "else", i);
      c.set(i, c.dtype(from), c.shape(from));
      if (const auto* k = c.known(from)) c.set_known(i, *k);
      continue;
    }
    auto numel = shape_numel(c.shape(0));
    if (!numel || *numel != Dim::of(1))
      c.fail("cond has shape {}; it must hold one element", to_string(c.shape(0)));
    size_t t = 1 + i, e = 1 + n + i;
    if (!c.has_input(t) || !c.has_input(e)) c.fail("a branch gives no output {}", i);
    if (c.dtype(t) != c.dtype(e) || c.shape(t) != c.shape(e))
      c.fail(
          "output {}: the then branch gives {} {} ('{}'), the else branch {} {} ('{}'); cond is "
          "only known at run time, and crossbow runs both branches and selects, which needs "
          "the same dtype and shape",
          i, dtype_name(c.dtype(t)), to_string(c.shape(t)), c.in(t).name, dtype_name(c.dtype(e)),
          to_string(c.shape(e)), c.in(e).name);
    c.set(i, c.dtype(t), c.shape(t));
  }
}

std::vector<ValueId> lower(LowerCtx& c) {
  const size_t n = c.node().outputs.size();
  const std::vector<Dim>* k = c.b.value(c.x(0)).known ? &*c.b.value(c.x(0)).known : nullptr;
  int pick = chosen(k);
  std::vector<ValueId> res(n, kNoValue);
  if (pick >= 0) {
    for (size_t i = 0; i < n; ++i) res[i] = c.x(1 + static_cast<size_t>(pick) * n + i);
    return res;
  }
  ValueId cond = c.b.reshape_to(c.x(0), {});
  for (size_t i = 0; i < n; ++i)
    if (c.has_output(i)) res[i] = c.b.op("Where", {cond, c.x(1 + i), c.x(1 + n + i)});
  return res;
}

}  // namespace

const OpDef kIf{.kind = OpKind::If,
                .name = "If",
                .inputs_min = 1,
                .inputs_max = -1,
                .outputs_min = 1,
                .outputs_max = -1,
                .infer = infer,
                .nondiff_inputs = bit(0),
                .lower = lower};

}  // namespace cb::ops
