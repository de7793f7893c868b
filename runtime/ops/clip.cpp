// Clip(X, min?, max?): bounds are attributes before opset 11 and optional scalar inputs after.
#include <limits>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

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
}  // namespace

const OpDef kClip{OpKind::Clip, "Clip", 1, 3, 1, 1, parse, infer, bit(1) | bit(2), 0, 0, bit(0)};

}  // namespace cb::ops
