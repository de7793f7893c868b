// LayoutReorder(X [N,C,D...]) -> Y [N,C,D...] (internal): the same tensor in the other CPU layout,
// plain (row-major) to oneDNN's blocked nChw16c or back (LayoutParams::to_blocked). Inserted by
// assign_blocked_layouts (runtime/passes.h) where a blocked activation meets an op that reads or
// writes only the plain layout; never differentiated (the pass runs on finished graphs).
#include "runtime/op_catalog.h"
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  const Shape& s = c.shape(0);
  if (s.size() != 4 || !s[1].is_static() || s[1].value % 16 != 0)
    c.fail("X (input 0 '{}') must be [N, C, H, W] with C a multiple of 16, got {}", c.in(0).name,
           to_string(s));
  c.expect_float(0, "X");
  infer_same_as_input(c);
}
}  // namespace

const OpDef kLayoutReorder{.kind = OpKind::LayoutReorder,
                           .name = "LayoutReorder",
                           .inputs_min = 1,
                           .inputs_max = 1,
                           .outputs_min = 1,
                           .outputs_max = 1,
                           .infer = infer,
                           .internal = true};

}  // namespace cb::ops
