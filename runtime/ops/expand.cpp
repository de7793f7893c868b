// Expand(X, shape): broadcast X to `shape` (numpy rules: a 1 in either keeps the other's dim).
#include "runtime/ops/op_util.h"

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
}  // namespace

const OpDef kExpand{OpKind::Expand, "Expand", 2, 2, 1, 1, nullptr, infer, 0, 0, bit(1)};

}  // namespace cb::ops
