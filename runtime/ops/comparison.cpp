// Greater, GreaterOrEqual, Less, LessOrEqual: numeric inputs of one type with numpy broadcasting,
// a bool output. Not differentiable. On known integer contents (shape arithmetic) the result is
// folded where it does not depend on the batch size N (N >= 1: 2N > N, N vs 3 unknown), as Equal
// does (elementwise_binary.cpp).
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
enum class Cmp { Greater, GreaterOrEqual, Less, LessOrEqual };

template <Cmp K>
void infer(InferCtx& c) {
  c.expect_same_dtype(0, 1);
  if (c.dtype(0) == DType::Bool) c.fail("inputs must be numeric, got bool");
  // Greater/Less-7 take float, int32 and int64 only; opset 9 opens them to every numeric type.
  if ((K == Cmp::Greater || K == Cmp::Less) && c.opset() < 9 && !dtype_is_float(c.dtype(0)) &&
      c.dtype(0) != DType::I32 && c.dtype(0) != DType::I64)
    c.fail("inputs must be float, int32 or int64 before opset 9, got {}", dtype_name(c.dtype(0)));
  c.set(0, DType::Bool, infer_broadcast(c, 0, 2));
  if (auto k = known_elementwise(c, 2, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        if (a[0].batch != a[1].batch) return std::nullopt;  // N vs 3 depends on N
        int64_t x = a[0].value, y = a[1].value;             // both constants or both multiples of N
        bool r = K == Cmp::Greater          ? x > y
                 : K == Cmp::GreaterOrEqual ? x >= y
                 : K == Cmp::Less           ? x < y
                                            : x <= y;
        return Dim::of(r ? 1 : 0);
      }))
    c.set_known(0, *k);
}
}  // namespace

#define CB_COMPARE(op_)                        \
  const OpDef k##op_{.kind = OpKind::op_,      \
                     .name = #op_,             \
                     .inputs_min = 2,          \
                     .inputs_max = 2,          \
                     .outputs_min = 1,         \
                     .outputs_max = 1,         \
                     .infer = infer<Cmp::op_>, \
                     .nondiff_inputs = bit(0) | bit(1)};

CB_COMPARE(Greater)
CB_COMPARE(GreaterOrEqual)
CB_COMPARE(Less)
CB_COMPARE(LessOrEqual)
#undef CB_COMPARE

}  // namespace cb::ops
