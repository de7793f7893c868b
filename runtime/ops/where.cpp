// Where(cond, X, Y): elementwise select with three-way numpy broadcasting.
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  if (c.dtype(0) != DType::Bool) c.fail("condition must be bool, got {}", dtype_name(c.dtype(0)));
  c.expect_same_dtype(1, 2);
  c.set(0, c.dtype(1), infer_broadcast(c, 0, 3));
  if (auto k = known_elementwise(c, 3, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        if (a[0].batch) return std::nullopt;
        return a[0].value ? a[1] : a[2];
      }))
    c.set_known(0, *k);
}
void vjp(VjpCtx& c) {
  ValueId zero = c.b.scalar(0.0, c.val(c.dy(0)).dtype);
  if (c.need(1)) c.set_dx(1, c.b.sum_to(c.b.op("Where", {c.x(0), c.dy(0), zero}), c.x_shape(1)));
  if (c.need(2)) c.set_dx(2, c.b.sum_to(c.b.op("Where", {c.x(0), zero, c.dy(0)}), c.x_shape(2)));
}
}  // namespace

const OpDef kWhere{.kind = OpKind::Where,
                   .name = "Where",
                   .inputs_min = 3,
                   .inputs_max = 3,
                   .outputs_min = 1,
                   .outputs_max = 1,
                   .infer = infer,
                   .nondiff_inputs = bit(0),
                   .vjp = vjp};

}  // namespace cb::ops
