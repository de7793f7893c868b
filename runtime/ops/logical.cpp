// And, Or, Xor (bool inputs, numpy broadcasting) and Not: bool -> bool, not differentiable.
// Known contents (bools from folded comparisons, 0/1) fold through them.
#include "runtime/ops/op_util.h"

namespace cb::ops {

namespace {
enum class Logic { And, Or, Xor, Not };

template <Logic K>
void infer(InferCtx& c) {
  size_t n = K == Logic::Not ? 1 : 2;
  for (size_t i = 0; i < n; ++i)
    if (c.dtype(i) != DType::Bool)
      c.fail("input {} '{}' must be bool, got {}", i, c.in(i).name, dtype_name(c.dtype(i)));
  c.set(0, DType::Bool, infer_broadcast(c, 0, n));
  if (auto k = known_elementwise(c, n, [](const std::vector<Dim>& a) -> std::optional<Dim> {
        bool x = a[0].value != 0, y = a.size() > 1 && a[1].value != 0;
        bool r = K == Logic::And ? x && y : K == Logic::Or ? x || y : K == Logic::Xor ? x != y : !x;
        return Dim::of(r ? 1 : 0);
      }))
    c.set_known(0, *k);
}
}  // namespace

#define CB_LOGIC(op_, n_)                               \
  const OpDef k##op_{.kind = OpKind::op_,               \
                     .name = #op_,                      \
                     .inputs_min = n_,                  \
                     .inputs_max = n_,                  \
                     .outputs_min = 1,                  \
                     .outputs_max = 1,                  \
                     .infer = infer<Logic::op_>,        \
                     .nondiff_inputs = bit(0) | bit(1), \
                     .inplace_inputs = bit(0)};

CB_LOGIC(And, 2)
CB_LOGIC(Or, 2)
CB_LOGIC(Xor, 2)
CB_LOGIC(Not, 1)
#undef CB_LOGIC

}  // namespace cb::ops
