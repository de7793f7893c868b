// ReduceSumTo(x, shape) (internal): sums x over the dims numpy broadcasting added or stretched
// to reach x's shape from `shape`, giving `shape`. The vjp of every broadcasting op uses it.
#include "runtime/ops/op_util.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
void infer(InferCtx& c) {
  Shape target = c.known_dims(1, "shape");
  auto b = broadcast(target, c.shape(0));
  if (!b || *b != c.shape(0))
    c.fail("{} is not a broadcast of {}", to_string(c.shape(0)), to_string(target));
  c.set(0, c.dtype(0), target);
}
void vjp(VjpCtx& c) {  // d/dx of a sum is the gradient broadcast back
  c.set_dx(0, c.b.op("Expand", {c.dy(0), c.b.shape_of(c.x_shape(0))}));
}
}  // namespace

const OpDef kReduceSumTo{.kind = OpKind::ReduceSumTo,
                         .name = "ReduceSumTo",
                         .inputs_min = 2,
                         .inputs_max = 2,
                         .outputs_min = 1,
                         .outputs_max = 1,
                         .infer = infer,
                         .value_inputs = bit(1),
                         .vjp = vjp,
                         .internal = true};

}  // namespace cb::ops
