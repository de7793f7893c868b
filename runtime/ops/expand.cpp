// Expand(X, shape): broadcast X to `shape` (numpy rules: a 1 in either keeps the other's dim).
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  Shape target = c.known_dims(1, "shape");
  auto out = broadcast(c.shape(0), target);
  if (!out)
    c.fail("cannot expand shape {} to {}: dims must be equal or 1", to_string(c.shape(0)),
           to_string(target));
  c.set(0, c.dtype(0), *out);
  const auto* k = c.known(0);
  if (k && out->size() == 1 && out->at(0).is_static() && k->size() == 1 &&
      out->at(0).value <= kKnownMaxElems)
    c.set_known(0, std::vector<Dim>(static_cast<size_t>(out->at(0).value), k->at(0)));
}
void vjp(VjpCtx& c) { c.set_dx(0, c.b.sum_to(c.dy(0), c.x_shape(0))); }
}  // namespace

const OpDef kExpand{.kind = OpKind::Expand,
                    .name = "Expand",
                    .inputs_min = 2,
                    .inputs_max = 2,
                    .outputs_min = 1,
                    .outputs_max = 1,
                    .infer = infer,
                    .value_inputs = bit(1),
                    .vjp = vjp};

}  // namespace cb::ops
