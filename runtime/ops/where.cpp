// Where(cond, X, Y): elementwise select with three-way numpy broadcasting.
#include "runtime/ops/op_util.h"

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
}  // namespace

const OpDef kWhere{OpKind::Where, "Where", 3, 3, 1, 1, nullptr, infer, bit(0)};

}  // namespace cb::ops
