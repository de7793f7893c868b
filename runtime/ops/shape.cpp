// Shape(X) -> i64 vector of X's dims (a slice [start, end) from opset 15). Always known, possibly
// in terms of N, so everything computed from it folds.
#include <algorithm>

#include "runtime/ops/op_util.h"
#include "runtime/ops/params.h"

namespace cb::ops {

namespace {
std::any parse(ParseCtx& c) {
  ShapeParams p;
  if (c.opset() >= 15) {
    p.start = c.i("start", 0);
    p.end = c.opt_i("end");
  }
  return p;
}
void infer(InferCtx& c) {
  const auto& p = c.p<ShapeParams>();
  int64_t r = c.rank(0);
  auto clamp = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
  int64_t b = clamp(p.start), e = clamp(p.end.value_or(r));
  std::vector<Dim> dims;
  for (int64_t i = b; i < e; ++i) dims.push_back(c.shape(0)[static_cast<size_t>(i)]);
  c.set(0, DType::I64, {Dim::of(static_cast<int64_t>(dims.size()))});
  c.set_known(0, dims);
}
}  // namespace

const OpDef kShape{.kind = OpKind::Shape,
                   .name = "Shape",
                   .inputs_min = 1,
                   .inputs_max = 1,
                   .outputs_min = 1,
                   .outputs_max = 1,
                   .parse = parse,
                   .infer = infer};

}  // namespace cb::ops
