// Clip(X, min?, max?): bounds are attributes before opset 11 and optional scalar inputs after.
#include <limits>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"
#include "runtime/vjp.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  ClipParams p;
  if (c.opset() < 11) {
    p.min = c.f("min", p.min);
    p.max = c.f("max", p.max);
  }
  return p;
}
void infer(InferCtx& c) {
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has_input(i)) continue;
    if (c.rank(i) != 0 && !(c.rank(i) == 1 && c.shape(i)[0] == Dim::of(1)))
      c.fail("{} (input {}) must be a scalar, got shape {}", i == 1 ? "min" : "max", i,
             to_string(c.shape(i)));
    c.expect_same_dtype(0, i);
  }
  infer_same_as_input(c);
}
void vjp(VjpCtx& c) {  // dx = dy where min <= x <= max, else 0
  std::vector<ValueId> in{c.dy(0), c.x(0)};
  for (size_t i = 1; i < 3; ++i) in.push_back(c.node().has_input(i) ? c.x(i) : kNoValue);
  c.set_dx(0, c.b.emit_with("ClipGrad", in, c.p<ClipParams>())[0]);
}
void infer_grad(InferCtx& c) { infer_like(c, 0, 1); }
}  // namespace

const OpDef kClip{.kind = OpKind::Clip,
                  .name = "Clip",
                  .inputs_min = 1,
                  .inputs_max = 3,
                  .outputs_min = 1,
                  .outputs_max = 1,
                  .parse = parse,
                  .infer = infer,
                  .nondiff_inputs = bit(1) | bit(2),
                  .inplace_inputs = bit(0),
                  .vjp = vjp};

const OpDef kClipGrad{.kind = OpKind::ClipGrad,
                      .name = "ClipGrad",
                      .inputs_min = 2,
                      .inputs_max = 4,
                      .outputs_min = 1,
                      .outputs_max = 1,
                      .infer = infer_grad,
                      .nondiff_inputs = bit(2) | bit(3),
                      .inplace_inputs = bit(0),
                      .internal = true};
}  // namespace cb::ops
